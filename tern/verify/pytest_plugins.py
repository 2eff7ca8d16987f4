"""pytest's installed plugins, looked up once per environment and handed to every run.

``pytest.main`` finds the installed plugins (the ``pytest11`` entry points) by reading the
entry points of every installed distribution, twice: to load them, and to mark their modules
for assertion rewriting. In a warm worker that was about 8 ms of a translated-tests job of
40-100 ms, and the answer is the same every time. ``installed_plugins`` keeps it, keyed by
``sys.path`` and its directories' modification times (installing or removing a distribution
adds or removes a directory in its site directory, which changes that directory's).

``run_pytest`` turns pytest's own lookup off (``--disable-plugin-autoload``) and passes
``EntryPointPlugins``, which registers the same plugins under the same names, in the order
pytest would. Their modules are not marked for rewriting: the worker imported them at
start-up (``tern.sandbox.worker``), so no run would rewrite them anyway.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import sys

GROUP = "pytest11"


def installed_plugins() -> tuple[tuple[str, object], ...]:
    """``(entry point name, plugin)`` of every installed pytest plugin, as pytest would load them."""
    return _load(_path_state())


def _path_state() -> tuple[tuple[str, int], ...]:
    state = []
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            state.append((entry, -1))
    return tuple(state)


@functools.lru_cache(maxsize=16)  # a worker's jobs put one of a few package roots in front
def _load(_state: tuple[tuple[str, int], ...]) -> tuple[tuple[str, object], ...]:
    """pluggy's ``load_setuptools_entrypoints``, without registering: the first entry point of a
    name wins. A plugin that fails to import raises, and nothing is kept."""
    found: dict[str, object] = {}
    for dist in list(importlib.metadata.distributions()):
        for entry in dist.entry_points:
            if entry.group == GROUP and entry.name not in found:
                found[entry.name] = entry.load()
    return tuple(found.items())


class EntryPointPlugins:
    """A pytest plugin that registers ``plugins`` when pytest starts parsing its command line.

    ``pytest_addhooks`` is the first hook of that parse, and pluggy allows registering plugins
    while it runs; each plugin's own ``pytest_addhooks`` then runs at its registration. A
    name pytest has already registered or blocked is left, as autoloading leaves it."""

    def __init__(self, plugins: tuple[tuple[str, object], ...]):
        self.plugins = plugins

    def pytest_addhooks(self, pluginmanager) -> None:
        for name, plugin in self.plugins:
            if pluginmanager.get_plugin(name) is None and not pluginmanager.is_blocked(name):
                pluginmanager.register(plugin, name=name)
