"""The installed Keras package's sources as a corpus of real code (located, never imported)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def keras_sample(count: int) -> list[Path]:
    """About ``count`` of Keras's source files, taken evenly across its sorted tree ([] without Keras)."""
    spec = importlib.util.find_spec("keras")
    if spec is None or not spec.submodule_search_locations:
        return []
    files = sorted(p for p in Path(list(spec.submodule_search_locations)[0]).rglob("*.py") if "__pycache__" not in p.parts)
    step = max(1, len(files) // count)
    return files[::step][:count]
