"""Inputs beyond the tests': where a translation that agrees on the recorded inputs may not.

The tests' inputs are usually small standard-normal arrays, far from the ranges where many
translation bugs show: an epsilon moved out of a square root changes nothing while the
variances are large, a normalisation that forgets to subtract the mean agrees on zero-mean
inputs, a softmax without its max subtracted agrees until the logits are large. So each
recorded layer call (the first per layer and mode) is also run by the recorder on probe
inputs, its float inputs transformed as below (integer and boolean inputs, ids and masks,
are kept), and the replay compares the translation's outputs there too.

The transforms are fixed, not random: a probe's input is a function of the recorded one, so
a difference found is reproduced by the next run from the same recording (which the cache
keeps). Outputs only, no gradients: the gradients of the recorded case are compared
already, and a translation's gradients come from its outputs by autodiff.

Not judged (and said so per probe): outputs Keras gives as NaN or infinity at a probe (the
probe left the layer's domain), and values whose float32 and float64 runs of the
translation differ beyond float32 rounding (``tolerance.ROUNDING_CEILING``): the probe made
the value ill-conditioned (a normalisation of an almost constant input with a tiny
epsilon), and neither side's float32 result means anything there.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tern.verify.tolerance import ROUNDING_CEILING, ROUNDING_FACTOR, compare


def _near_mean(array: np.ndarray) -> np.ndarray:
    """Variance shrunk a millionfold along the last axis, mean kept: the regime where an
    epsilon's place in a normalisation decides the result."""
    mean = array.mean(axis=-1, keepdims=True)
    return mean + 1e-3 * (array - mean)


#: name -> transform of one float input array (its dtype kept)
PROBES: tuple[tuple[str, Callable[[np.ndarray], np.ndarray]], ...] = (
    ("inputs x 1e-3", lambda a: a * 1e-3),
    ("inputs x 1e-7", lambda a: a * 1e-7),  # norms below a guard's epsilon: x / max(||x||, eps)
    ("inputs x 100", lambda a: a * 100.0),
    ("inputs + 3", lambda a: a + 3.0),
    ("inputs near their mean (last axis)", _near_mean),
)


def probe_inputs(floats: list[np.ndarray]) -> list[tuple[str, list[np.ndarray]]]:
    """``(probe name, transformed float inputs)`` per probe that changes some input (a probe of
    an all-zero input is that input again, and is left out)."""
    found = []
    for name, transform in PROBES:
        moved = [transform(a).astype(a.dtype) if a.ndim else a for a in floats]
        if any(not np.array_equal(m, a) for m, a in zip(moved, floats)):
            found.append((name, moved))
    return found


def judged_leaves(outputs: list[np.ndarray], left_out: set[int]) -> list[int]:
    """Output positions a probe compares: finite float or integer Keras outputs the recorded
    case compares too (``left_out``: its sampled outputs)."""
    return [i for i, leaf in enumerate(outputs)
            if i not in left_out and np.asarray(leaf).dtype.kind in "fiub" and np.all(np.isfinite(leaf))]


def probe_checks(probes: list[dict], arrays: Any, run32: Callable[[list], list], run64: Callable[[list], list],
                 tolerance: dict | None, keras64: dict[str, list] | None = None) -> list[dict]:
    """The translation's outputs at each recorded probe (``run32``/``run64``: float inputs ->
    output leaves, in float32 / float64) against Keras's. A value that fails in float32 is
    judged again from the float64 run, as a recorded case's is (``replay.against_float64``),
    and, where the Keras float64 reference ran (``keras64``: probe name -> Keras's float64
    output leaves), against Keras in float64 too: Keras's own float32 rounding can be the
    larger one. A value none of these explains is a mismatch, named with its probe."""
    from tern.verify.arrays import array_paths, unpack

    checks = []
    for probe in probes:
        floats = unpack(probe["inputs"], arrays)
        got = run32(floats)
        paths = array_paths(probe["outputs"])
        if len(got) != len(paths):
            checks.append({"name": f"outputs @ {probe['name']}", "ok": False,
                           "problem": f"{len(got)} outputs, keras gave {len(paths)}"})
            continue
        values = [(f"{paths[i][0]} @ {probe['name']}", got[i], arrays[f"a{paths[i][1]}"]) for i in probe["compared"]]
        found = [compare(name, value, want, tolerance) for name, value, want in values]
        if not all(c["ok"] for c in found):
            wide = run64(floats)
            theirs = (keras64 or {}).get(probe["name"])
            found = [check if check["ok"] else _again(check, value, wide[i], tolerance,
                                                      None if theirs is None or i >= len(theirs) else theirs[i])
                     for check, value, i in zip(found, values, probe["compared"])]
        checks.extend(found)
    return checks


def _again(check: dict, value: tuple, wide: Any, tolerance: dict | None, keras64: Any = None) -> dict:
    name, narrow, want = value
    narrow_errors = {k: check[k] for k in ("max_abs", "max_rel")}
    if keras64 is not None:
        both = compare(name, wide, keras64, tolerance)
        if both["ok"]:
            return {**both, "float32": narrow_errors, "keras_float64": True}
    rounding = float(np.max(np.abs(np.asarray(narrow, np.float64) - np.asarray(wide, np.float64)), initial=0.0))
    scale = max(1.0, float(np.max(np.abs(np.asarray(wide, np.float64)), initial=0.0)))
    if rounding > ROUNDING_CEILING * scale:
        return {"name": name, "ok": True, "not_judged": f"ill-conditioned here: the translation's float32 and float64 "
                f"runs differ by {rounding:.3g}", "float32": narrow_errors}
    again = compare(name, wide, want, tolerance, rounding=rounding)
    if keras64 is not None and not again["ok"]:
        return {**compare(name, wide, keras64, tolerance), "float32": narrow_errors, "keras_float64": True}
    return {**again, "float32": narrow_errors, "rounding": rounding, "factor": ROUNDING_FACTOR}
