"""Directories that projects which trust each other may share (a CI machine, a test suite),
named by environment variables read where the sandbox runs: the daemon's environment, when
verify goes through the daemon.

* ``TERN_JAX_CACHE``: XLA's compilation cache. Sandboxed code writes it, and the other
  projects' workers load what it wrote.
* ``TERN_RECORDINGS``: what the TF side of verification made (recordings of the original
  tests, Keras's initial weights, float64 references, sampled runs; ``verify/cache.py``).
  Each depends on the original package, the TF libraries, tern's code and the verify
  settings alone, all in its key, so a project verifying the same original with the same
  settings reuses it instead of running TensorFlow again. The pool publishes there after a
  job; jobs read it, read-only.
"""

from __future__ import annotations

import os
from pathlib import Path

JAX_CACHE_ENV = "TERN_JAX_CACHE"
RECORDINGS_ENV = "TERN_RECORDINGS"


def shared_dir(env: str) -> Path | None:
    """The directory ``$env`` names, resolved; None when it is unset or empty."""
    value = os.environ.get(env, "").strip()
    return Path(value).resolve() if value else None
