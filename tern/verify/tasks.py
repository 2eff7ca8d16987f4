"""Sandbox tasks of verification (run inside workers; see ``tern.sandbox.jobs``)."""

from __future__ import annotations

from pathlib import Path

from tern.verify.junit import run_pytest
from tern.verify.record import record_tests
from tern.verify.replay import replay_module
from tern.verify.step_replay import replay_steps

__all__ = ["record_tests", "replay_module", "replay_steps", "translated_tests"]


def translated_tests(payload: dict, scratch: Path) -> dict:
    """Task: run translated test files with pytest in the warm JAX worker."""
    root = Path(payload["root"])
    return run_pytest([str(root / f) for f in payload["files"]], root, scratch)
