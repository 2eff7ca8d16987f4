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
"""

from __future__ import annotations

import ast
import os
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
        if not own:
            return
        last = own[-1]
        path = os.path.abspath(str(last.path))
        if path not in self.test_files:
            return
        if path not in self._parsed:
            self._parsed[path] = statements(path)
        todo = todo_above(self._parsed[path], last.lineno + 1)
        if todo:
            line = last.lineno + 1
            self.found[nodeid] = f"{excinfo.typename} at {os.path.basename(path)}:{line}, a line tern left untranslated ({todo})"


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
