"""Beyond the fixed probes: a short gradient-ascent search for the input where the
translation and Keras differ most.

The probes (``probes.py``) move a layer's inputs along fixed families (scales, a shift,
variance shrunk to the mean). A bug can hide between them: a reduction over the wrong axis
agrees on the constant inputs a test built with ``tf.ones``, and on every scale of them.
So, per layer or package-function case the probes were recorded for, the difference
itself is climbed:

    D(x) = 1/2 * sum over compared outputs of ((jax(x) - keras(x)) / (atol + rtol * |keras(x)|))^2

``grad D = J_jax^T r - J_keras^T r`` with ``r`` the scaled residual (the denominators held
fixed). TF and JAX live in separate worker processes, so a round is two jobs:

* a JAX job (``search_replay.py``) evaluates the translation at the points it is given,
  keeps the worst (the largest share of its tolerance used), and writes there ``r`` and the
  translation's half of the gradient, ``J_jax^T r``;
* a TF job (``search_keras.py``) rebuilds the Keras layer from its recording (or calls the
  original function), adds Keras's half, and steps from the worst point along the ascent
  direction: each float input moves by ``s * rms(x) * d / rms(d)`` for the step sizes
  ``STEPS`` (a line search), and, in the first round only, by 10% of its rms in a fixed random direction (a start off the flat
  ground where both sides agree exactly and the gradient is zero). Keras's outputs there
  are the next JAX job's points.

``rounds`` such rounds (``[tool.tern.verify] search_rounds``, 2 by default, 0 to switch the
search off) take ``2 * rounds + 1`` jobs, cached like every job on the recording and the
translation.

Both sides compute in float64 throughout (the Keras layer rebuilt under a float64 policy,
the translation under ``jax.enable_x64``): the search climbs the true difference, not the
float32 rounding of two kernels, and a point is judged there against the float32
tolerance. No rounding excuse is needed or given: in float64 a correct translation is
within 1e-12 of Keras at any point it can compute, so a value beyond ``atol + rtol *
|keras|`` is a difference in what is computed. A point where Keras's float64 output is not
finite is not judged. A layer Keras cannot rebuild in float64, or a function that fixes
its own float dtype, is not searched, and says so. Where either side cannot be
differentiated (a ``while_loop`` in JAX), there is no ascent: only the step around.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tern.verify.tolerance import tolerance_for

#: line-search step sizes, in units of each input's rms
STEPS = (0.01, 0.03, 0.1, 0.3, 1.0)
#: the first round's start off flat ground: this share of each input's rms, in a fixed direction
AROUND = 0.1
#: float inputs larger than this (elements, all inputs together) are not searched: the
#: search is for fixture-sized layers, whose rounds cost milliseconds
MAX_ELEMENTS = 1 << 16
#: XLA options for the translation's float64 step in a search job: it runs a handful of
#: times per job, so compiling it fast matters more than running it fast (on the ResNet
#: fixture: compiled in 0.6-0.7 s instead of 1.5-1.6 s, run in 15 ms instead of 2 ms)
QUICK_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def scaled_residual(got: list, want: list, compared: list[int], tolerance: dict | None) -> tuple[float, list]:
    """``(largest share of its tolerance any compared value used, r per output leaf)``; ``r``
    is None for leaves not compared. A non-finite Keras value is left out (not judged)."""
    worst, residual = 0.0, [None] * len(got)
    for i in compared:
        a, b = np.asarray(got[i], np.float64), np.asarray(want[i], np.float64)
        if a.shape != b.shape:
            return float("inf"), residual
        tol = tolerance_for(np.float32, tolerance)
        bound = tol["atol"] + tol["rtol"] * np.abs(b)
        finite = np.isfinite(b)
        diff = np.where(finite, a - b, 0.0)
        if not np.all(np.isfinite(diff)):
            return float("inf"), residual  # Keras finite, the translation not
        share = np.abs(diff) / bound
        worst = max(worst, float(share.max(initial=0.0)))
        residual[i] = diff / bound**2
    return worst, residual


def _rms(array: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(array, dtype=np.float64)))) if array.size else 0.0


def next_points(round_index: int, floats: list[np.ndarray], ascent: list[np.ndarray]) -> list[tuple[str, list]]:
    """``(name, moved float inputs)`` per candidate of a round: the line search along
    ``ascent`` (``grad D`` per float input), then, in round 0, the fixed step around."""
    scales = [_rms(x) or 1.0 for x in floats]
    directions = [d / (_rms(d) or 1.0) for d in ascent]
    found = []
    if any(_rms(d) > 0 for d in ascent):
        for s in STEPS:
            found.append((f"search {round_index + 1}: x + {s:g} rms * ascent",
                          [x + s * scale * d for x, scale, d in zip(floats, scales, directions)]))
    if round_index == 0:
        rng = np.random.default_rng(0)
        found.append(("search 1: x + 0.1 rms * noise",
                      [x + AROUND * scale * rng.standard_normal(x.shape) for x, scale in zip(floats, scales)]))
    return found


def searchable(meta: dict, arrays: Any) -> str:
    """Why a recorded layer or function case is not searched, or "" when it is."""
    if meta.get("kind") == "config":
        return "configurations are replayed step by step, not searched"
    if not meta.get("probes"):
        return "no probes recorded (a random call, or not the first case of its layer or function)"
    if meta.get("kind") == "function":
        if meta.get("draws"):
            return "a drawing function (replayed with TF's draws injected)"
        floats = [arrays[f"a{at}"] for at in meta["probes"][0]["float_at"]]
    else:
        if "weights" not in meta:
            return "the recording keeps no Keras weights for this case"
        from tern.verify.arrays import unpack

        args, kwargs = unpack(meta["inputs"], arrays)
        floats = [leaf for leaf in _leaves([args, kwargs]) if isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f"]
    if any(leaf.dtype != np.float32 for leaf in floats):
        return "float inputs not float32"
    if sum(leaf.size for leaf in floats) > MAX_ELEMENTS:
        return f"inputs larger than {MAX_ELEMENTS} elements"
    return ""


def _leaves(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    return [value]
