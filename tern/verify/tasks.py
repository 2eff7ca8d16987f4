"""Sandbox tasks of verification (run inside workers; see ``tern.sandbox.jobs``)."""

from __future__ import annotations

import os
from pathlib import Path

from tern.verify.files_run import files_run
from tern.verify.init_keras import init_samples
from tern.verify.init_replay import init_compare
from tern.verify.junit import run_pytest
from tern.verify.record import record_tests
from tern.verify.reference import reference_float64
from tern.verify.replay import replay_module
from tern.verify.sample_calls import sample_calls
from tern.verify.search_keras import search_keras
from tern.verify.search_replay import search_round
from tern.verify.step_replay import replay_steps

__all__ = ["init_compare", "init_samples", "record_tests", "reference_float64", "replay_module", "replay_steps",
           "sample_calls", "search_keras", "search_round", "translated_tests"]


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


def module_name(path: Path, root: Path) -> str:
    parts = list(Path(os.path.relpath(os.path.abspath(path), os.path.abspath(root))).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
