"""The tolerance policy: when a translated value equals the recorded Keras one.

Structure first (same shape, same kind of dtype), then values with
``|jax - keras| <= atol + rtol * |keras| + ROUNDING_FACTOR * rounding``, where ``rounding``
is the translation's own measured float32 rounding when the float64 rerun gave one
(``replay.py``'s docstring); the maximum absolute and relative errors are always reported.
Used by every replay: layers and models, package functions, training steps, ported weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: float32 defaults; half precision gets looser ones (``tolerance_for``)
DEFAULT_TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
#: how much more than the translation's own float32 rounding Keras's may be (other kernels,
#: other summation orders: oneDNN's blocked convolutions against XLA's)
ROUNDING_FACTOR = 8.0
#: the most a float32 computation's own rounding can be, relative to its values (at least 1):
#: beyond it, the float32 and float64 runs computed different things, and nothing is excused
ROUNDING_CEILING = 1e-2
HALF_TOLERANCE = {"float16": {"rtol": 1e-3, "atol": 1e-3}, "bfloat16": {"rtol": 1e-2, "atol": 1e-2}}


def tolerance_for(dtype: np.dtype, configured: dict | None) -> dict:
    if configured:
        return {**DEFAULT_TOLERANCE, **configured}
    return HALF_TOLERANCE.get(np.dtype(dtype).name, DEFAULT_TOLERANCE)


def compare(name: str, got: Any, want: np.ndarray, tolerance: dict | None, rounding: float = 0.0) -> dict:
    """One output (or gradient) compared: shapes, then values; errors always reported.
    ``rounding``: the measured float32 rounding of ``got``'s computation (module docstring)."""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        return {"name": name, "ok": False, "problem": f"shape {list(got.shape)} != keras {list(want.shape)}"}
    if got.dtype.kind != want.dtype.kind and not {got.dtype.kind, want.dtype.kind} <= {"i", "u"}:
        return {"name": name, "ok": False, "problem": f"dtype {got.dtype} vs keras {want.dtype}"}
    tol = tolerance_for(want.dtype, tolerance)
    a, b = got.astype(np.float64), want.astype(np.float64)
    diff = np.abs(a - b)
    finite = np.isfinite(b)
    same_nonfinite = bool(np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(a[np.isinf(b)], b[np.isinf(b)]))
    max_abs = float(diff[finite].max()) if finite.any() else 0.0
    max_rel = float((diff[finite] / np.maximum(np.abs(b[finite]), np.finfo(np.float32).tiny)).max()) if finite.any() else 0.0
    bound = tol["atol"] + tol["rtol"] * np.abs(b[finite]) + ROUNDING_FACTOR * rounding
    ok = bool(same_nonfinite and np.all(diff[finite] <= bound))
    used = float((diff[finite] / bound).max()) if finite.any() else 0.0  # 1.0: at the tolerance's edge
    return {"name": name, "ok": ok, "max_abs": max_abs, "max_rel": max_rel, "used": used, **tol}
