"""Sandbox tasks of verification (run inside workers; see ``tern.sandbox.jobs``)."""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from pathlib import Path

from tern.verify.junit import run_pytest
from tern.verify.record import record_tests
from tern.verify.reference import reference_float64
from tern.verify.replay import replay_module
from tern.verify.step_replay import replay_steps

__all__ = ["record_tests", "reference_float64", "replay_module", "replay_steps", "translated_tests"]


def translated_tests(payload: dict, scratch: Path) -> dict:
    """Task: run translated test files with pytest in the warm JAX worker; also say which
    of the package's modules had code run by them (``ran``): a module reached only through
    others (an abstract base, a helper) is checked by the tests that run it. ``select``:
    node ids (``pkg/test_x.py::test_y``) to run instead of the files' every test."""
    root = Path(payload["root"])
    files = [str(root / f) for f in payload["files"]]
    select = [str(root / t) for t in payload.get("select", [])]
    with files_run(root) as ran:
        result = run_pytest(files, root, scratch, translated=True, select=select)
    return {**result, "ran": sorted({module_name(path, root) for path in ran} - {module_name(Path(f), root) for f in files})}


@contextlib.contextmanager
def files_run(root: Path):
    """The source files under ``root`` whose named functions were called while the block
    ran (a call-only tracer: no line events, so the cost is one check per Python call).
    Module and class bodies, comprehensions and lambdas do not count: importing a module
    runs those, and an import reaches nothing."""
    prefix, seen, files = os.path.abspath(root) + os.sep, set(), set()

    def on_call(frame, event, arg):
        code = frame.f_code
        if code not in seen:
            seen.add(code)
            if (code.co_flags & inspect.CO_NEWLOCALS and not code.co_name.startswith("<")
                    and code.co_filename.startswith(prefix) and code.co_filename.endswith(".py")):
                files.add(Path(code.co_filename))
        return previous(frame, event, arg) if previous is not None else None  # a tracer already set keeps tracing

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        yield files
    finally:
        sys.settrace(previous)


def module_name(path: Path, root: Path) -> str:
    parts = list(Path(os.path.relpath(os.path.abspath(path), os.path.abspath(root))).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
