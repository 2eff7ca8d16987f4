"""Task functions a worker runs: ``fn(payload, scratch) -> dict`` (see ``jobs``).

Small and generic on purpose: ``echo`` measures the pool itself; ``run_code`` runs a
Python snippet (fault-injection tests, and snippets the LLM agent wants to try) with the
worker's TensorFlow or JAX already imported.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def echo(payload: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """The payload back, with who answered: ``pid`` is the worker's pid in its own namespace."""
    return {**payload, "pid": os.getpid(), "kind": os.environ.get("TERN_WORKER_KIND", "")}


def run_code(payload: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """Execute ``payload["code"]`` in a fresh namespace; return ``repr`` of its ``result`` variable if set.

    The snippet is written to a file first: tracebacks then show its lines, and
    ``inspect.getsource`` works, which AutoGraph (``tf.function``) needs. Exceptions
    propagate: the worker reports them as ``cause="error"`` with the traceback.
    """
    path = scratch / "snippet.py"
    path.write_text(payload["code"])
    namespace: dict[str, Any] = {"__name__": "__tern_snippet__", "__file__": str(path), "scratch": scratch}
    exec(compile(payload["code"], str(path), "exec"), namespace)
    return {"result": repr(namespace["result"])} if "result" in namespace else {}
