"""Tell a translated test that stopped on a line tern left untranslated from one that failed.

A test file the rules could not translate completely keeps some original statements under
``# TODO(tern): ...`` comments. When such a statement raises (``import tensorflow`` in a
worker where TensorFlow is unimportable, ``model.layers`` on a Flax module), the test says
nothing about the translated package: its checks after that line never ran. Counting it
as a failure would report a mismatch nobody measured; counting it as a pass would hide
that it did not run. It is reported as its own outcome, ``untranslated``.

Only when that is certain: the exception is not an assertion (a kept line that ran its
comparison and lost it is a failure), and no frame of the package's own code lies beyond the
test file's TODO-marked statement in the traceback (the package raising under it is the
package's failure). Frames of third-party libraries (Flax raising on an unknown attribute)
may.

An import the rules kept (``import tensorflow as tf`` under "still used by untranslated
code") would stop the whole file at collection, though only some tests use it. While the
tests run, such an import that fails binds a ``Missing`` placeholder instead: using it
(calling it, iterating it, testing it) raises ``ModuleNotFoundError`` on the test's own
kept line, so that test is "untranslated" and the file's other tests still run and count.
Only imports written in the test files, on TODO-marked statements.
"""

from __future__ import annotations

import ast
import builtins
import os
import sys
from pathlib import Path

import pytest

MARK = "TODO(tern)"


class UntranslatedLines:
    """A pytest plugin: which tests (and which test files, at collection) ended on an
    untranslated statement of a test file. ``found`` maps a pytest node id to a reason."""

    def __init__(self, root: Path, test_files: list[str]):
        self.root = os.path.abspath(root) + os.sep
        self.test_files = {os.path.abspath(f) for f in test_files}
        self.found: dict[str, str] = {}
        self._parsed: dict[str, tuple[list[str], list[ast.stmt]] | None] = {}
        self._import = None

    def pytest_sessionstart(self, session):
        self._import = builtins.__import__
        builtins.__import__ = self._kept_import

    def pytest_sessionfinish(self, session):
        if self._import is not None:
            builtins.__import__ = self._import
            self._import = None

    def _kept_import(self, name, globals=None, locals=None, fromlist=(), level=0):
        try:
            return self._import(name, globals, locals, fromlist, level)
        except ImportError:
            importer = os.path.abspath((globals or {}).get("__file__") or "")
            frame = sys._getframe(1)
            if level or importer not in self.test_files or os.path.abspath(frame.f_code.co_filename) != importer:
                raise
            if not todo_above(self._statements(importer), frame.f_lineno):
                raise
            return Missing(name if fromlist else name.partition(".")[0])

    def _statements(self, path: str):
        if path not in self._parsed:
            self._parsed[path] = statements(path)
        return self._parsed[path]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if report.failed and call.excinfo is not None:
            self._note(report.nodeid, call.excinfo)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector):
        outcome = yield
        report = outcome.get_result()
        call = getattr(report, "call", None)
        if report.failed and call is not None and call.excinfo is not None:
            self._note(report.nodeid, call.excinfo)

    def _note(self, nodeid: str, excinfo) -> None:
        cause = excinfo.value.__cause__
        if excinfo.errisinstance(pytest.Collector.CollectError) and cause is not None:
            excinfo = pytest.ExceptionInfo.from_exception(cause)  # an import error, which pytest rewraps
        if excinfo.errisinstance((AssertionError, pytest.fail.Exception)):
            return
        own = [entry for entry in excinfo.traceback if str(entry.path).startswith(self.root)]
        tests = [entry for entry in own if os.path.abspath(str(entry.path)) in self.test_files]
        if excinfo.errisinstance(MissingUsed) and tests:
            where = tests[-1]
            self.found[nodeid] = (f"{excinfo.value} (at {os.path.basename(str(where.path))}:{where.lineno + 1})")
            return
        if not own or own[-1] is not (tests[-1] if tests else None):
            return
        last = own[-1]
        todo = todo_above(self._statements(os.path.abspath(str(last.path))), last.lineno + 1)
        if todo:
            self.found[nodeid] = (f"{excinfo.typename} at {os.path.basename(str(last.path))}:{last.lineno + 1}, "
                                  f"a line tern left untranslated ({todo})")


class MissingUsed(ModuleNotFoundError):
    """A ``Missing`` placeholder was used: wherever that happens, the value came from an
    import tern left untranslated in a test file."""


class Missing:
    """What a kept import of an unimportable module binds in a test file: attributes are
    further placeholders (``tf.keras.layers``); any use raises, on the line that uses it."""

    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr: str) -> "Missing":
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Missing(f"{self._name}.{attr}")

    def _fail(self, *args, **kwargs):
        raise MissingUsed(f"{self._name}: not importable where the translation runs (an import tern left untranslated)")

    __call__ = __iter__ = __bool__ = __getitem__ = __enter__ = __len__ = __setattr__ = _fail
    __add__ = __radd__ = __sub__ = __mul__ = __rmul__ = __truediv__ = __eq__ = __lt__ = __gt__ = _fail
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"<missing {self._name}>"


def todo_above(parsed: tuple[list[str], list[ast.stmt]] | None, line: int) -> str:
    """The first ``TODO(tern)`` comment directly above the innermost statement holding ``line``
    (the comments tern writes before a statement it kept), or "". ``parsed``: ``statements(path)``."""
    if parsed is None:
        return ""
    lines, nodes = parsed
    holding = [s for s in nodes if s.lineno <= line <= (s.end_lineno or s.lineno)]
    if not holding:
        return ""
    first = max(holding, key=lambda s: s.lineno).lineno  # the innermost: it starts last
    todos, index = [], first - 2
    while index >= 0 and lines[index].strip().startswith("#"):
        if MARK in lines[index]:
            todos.append(lines[index].strip().lstrip("#").strip())
        index -= 1
    return todos[-1][:160] if todos else ""


def statements(path: str) -> tuple[list[str], list[ast.stmt]] | None:
    try:
        text = Path(path).read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    return text.splitlines(), [node for node in ast.walk(tree) if isinstance(node, ast.stmt)]
