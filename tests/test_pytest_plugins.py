"""How the sandbox runs pytest (tern/verify/junit.py, tern/verify/pytest_plugins.py): the
installed plugins found once and registered as pytest's own autoloading would, and no
conftest.py from above the package's root."""

from __future__ import annotations

import os
import sys

import pytest

from tern.verify.junit import run_pytest
from tern.verify.pytest_plugins import EntryPointPlugins, installed_plugins


class _Registered:
    """Records the plugin manager's (name, plugin) pairs, in registration order, once configured
    (not those named by their id: the run's config and plugin manager)."""

    def __init__(self):
        self.pairs: list[tuple[str, object]] = []

    def pytest_configure(self, config):
        self.pairs = [(name, plugin) for name, plugin in config.pluginmanager.list_name_plugin()
                      if not isinstance(plugin, (_Registered, EntryPointPlugins)) and not name.isdigit()]


def test_the_plugins_are_registered_as_autoloading_registers_them(tmp_path):
    (tmp_path / "one_test.py").write_text("def test_one():\n    pass\n")
    args = [str(tmp_path / "one_test.py"), "-q", "-p", "no:cacheprovider", "-c", os.devnull, "--rootdir", str(tmp_path)]
    autoloaded, ours = _Registered(), _Registered()
    assert pytest.main(args, plugins=[autoloaded]) == 0
    assert pytest.main([*args, "--disable-plugin-autoload"], plugins=[ours, EntryPointPlugins(installed_plugins())]) == 0
    names = [name for name, _ in autoloaded.pairs]
    assert "xdist" in names  # an installed plugin (the test extra), under its entry point's name
    def seen(pairs):  # a module is the same object in both runs; a run's own objects (its session) are not
        return [(name, plugin if isinstance(plugin, type(os)) else type(plugin)) for name, plugin in pairs]

    assert seen(ours.pairs) == seen(autoloaded.pairs)


def test_a_plugin_installed_while_a_worker_lives_is_found(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    os.utime(site, (1_000_000, 1_000_000))  # an old directory: the install below changes its time
    monkeypatch.syspath_prepend(str(site))
    before = dict(installed_plugins())
    assert "ternprobe" not in before
    (site / "ternprobe_plugin.py").write_text("PROBE = True\n")
    info = site / "ternprobe-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ternprobe\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pytest11]\nternprobe = ternprobe_plugin\n")
    try:
        after = dict(installed_plugins())
        assert after["ternprobe"].PROBE and set(after) - set(before) == {"ternprobe"}
    finally:
        sys.modules.pop("ternprobe_plugin", None)


def _tree(root, conftest_above: str) -> None:
    (root / "pkg").mkdir(parents=True)
    (root.parent / "conftest.py").write_text(conftest_above)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "conftest.py").write_text("import pytest\n\n\n@pytest.fixture\ndef answer():\n    return 42\n")
    (root / "pkg" / "answer_test.py").write_text("def test_answer(answer):\n    assert answer == 42\n")


def test_a_conftest_above_the_root_is_not_loaded_and_the_packages_own_is(tmp_path):
    root, scratch = tmp_path / "links" / "0123", tmp_path / "scratch"
    scratch.mkdir()
    _tree(root, "raise RuntimeError('loaded from above the root')\n")
    sys.path.insert(0, str(root))
    try:
        result = run_pytest([str(root / "pkg" / "answer_test.py")], root, scratch)
    finally:
        sys.path.remove(str(root))
        for name in ("pkg", "pkg.conftest", "pkg.answer_test"):
            sys.modules.pop(name, None)
    assert result["exit"] == 0, result
    assert list(result["tests"].values()) == ["passed"]
