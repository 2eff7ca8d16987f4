"""Run TensorFlow and JAX jobs in warm, isolated worker processes (see ``pool.Sandbox``).

The names below load on first use: the thin ``tern`` client imports ``tern.sandbox.daemon``
and must not pay for the pool (anyio) to reach the socket.
"""

import importlib

_EXPORTS = {
    "LEVELS": "isolation", "available": "isolation", "detect": "isolation",
    "Cause": "jobs", "Job": "jobs", "JobResult": "jobs", "Kind": "jobs",
    "Sandbox": "pool",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
