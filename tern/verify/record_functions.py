"""Record the original tests' calls of the package's plain functions (array in, array out).

A helper such as ``normalize(x)`` or a ``tf.while_loop`` routine is otherwise only as
checked as the translated tests' assertions; recorded here, its calls replay on the
translation like layer calls (``replay_functions.py``), outputs compared value by value.

Recorded: a top-level call (not inside a layer call or another package function), made
eagerly, whose arguments are arrays, tensors, Python scalars, strings, ``None`` and
containers of them (no ``tf.Variable``: a function may assign to it), and whose result is
arrays alone (tensors, NumPy arrays, nested in tuples, lists or dicts). The recorder calls
it a second time on the same arguments; results that differ (random draws) are recorded
with TF's draws where they can be injected (``draws.py``), else with many runs of the results
that differ, which the replay compares as distributions (``distributions.py``). A function
that builds a layer or model is a factory (``record.py``).
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import numpy as np

from tern.verify.arrays import Unpackable, pack, unpack, write_case
from tern.verify.distributions import affordable_runs
from tern.verify.draws import pack_draws
from tern.verify.interface import function_defaults
from tern.verify.probes import judged_leaves, probe_inputs
from tern.verify.variants import argument_variants


def _tf():
    import tensorflow as tf

    return tf


def argument_array(value: Any) -> np.ndarray | None:
    tf = _tf()
    if isinstance(value, tf.Variable):
        raise Unpackable("a tf.Variable argument (the function may assign to it)")
    if isinstance(value, tf.Tensor):
        return None if value.dtype == tf.string else np.asarray(value.numpy())
    return None


def _result_leaves(result: Any) -> list[np.ndarray] | None:
    """Every leaf of ``result`` as an array, or None when one is not an array."""
    tf = _tf()
    leaves = []
    for leaf in tf.nest.flatten(result):
        if isinstance(leaf, tf.Tensor) and leaf.dtype != tf.string and not isinstance(leaf, tf.SparseTensor):
            leaves.append(np.asarray(leaf.numpy()))
        elif isinstance(leaf, np.ndarray) and leaf.dtype.kind in "biuf":
            leaves.append(leaf)
        else:
            return None
    return leaves or None


def _as_arrays(result: Any) -> Any:
    tf = _tf()
    return tf.nest.map_structure(lambda leaf: np.asarray(leaf.numpy()) if isinstance(leaf, tf.Tensor) else leaf, result)


def _sample(recorder: Any, fn: Any, args: tuple, kwargs: dict, first: list[np.ndarray], again: list[np.ndarray] | None,
            seconds_per_call: float) -> dict | None:
    """A function whose draws cannot be injected, called many more times on the same arguments:
    ``{"leaves": positions of the results that differed, "runs": [(runs, *shape) per result]}``
    for the replay to compare as distributions; None when the two calls differ otherwise (a
    failure, another structure or shape), too few calls are affordable, or a result that
    differed is not numeric."""
    if again is None or len(again) != len(first) or any(a.shape != b.shape for a, b in zip(first, again)):
        return None
    sampled = [i for i, (a, b) in enumerate(zip(first, again)) if not np.array_equal(a, b, equal_nan=True)]
    if any(first[i].dtype.kind not in "fiub" for i in sampled):
        return None
    runs = affordable_runs(seconds_per_call, [first[i].size for i in sampled])
    if not runs:
        return None
    kept = []
    recorder.replaying = True
    try:
        for _ in range(runs):
            leaves = _result_leaves(fn(*args, **kwargs))
            if leaves is None or len(leaves) != len(first) or any(leaves[i].shape != first[i].shape for i in sampled):
                return None
            kept.append([leaves[i] for i in sampled])
    except Exception:  # noqa: BLE001 - the function refused a call of ours
        return None
    finally:
        recorder.replaying = False
    return {"leaves": sampled, "runs": [np.stack([one[k] for one in kept]) for k in range(len(sampled))]}


def _with_draws(recorder: Any, fn: Any, args: tuple, kwargs: dict) -> tuple[Any, list] | None:
    """A function whose two calls differ, called once recording its random draws and once
    with them handed back (``draws.py``): its result and draws when the two agree."""
    tape = recorder.draw_tape
    recorder.replaying = True
    try:
        with tape.recording():
            result = fn(*args, **kwargs)
        draws, other = list(tape.draws), tape.other
        if not draws or other:
            return None
        with tape.replaying(draws):
            again = fn(*args, **kwargs)
    except Exception:  # noqa: BLE001 - DrawsDoNotLineUp, or the function refused a second call
        return None
    finally:
        recorder.replaying = False
    first, second = _result_leaves(result), _result_leaves(again)
    if first is None or second is None or len(first) != len(second) or not all(
            a.shape == b.shape and np.array_equal(a, b, equal_nan=True) for a, b in zip(first, second)):
        return None
    return result, draws


def _probe(recorder: Any, fn: Any, inputs: Any, arrays: list[np.ndarray]) -> list[tuple]:
    """The function again on its float arguments moved beyond the test's (``probes.py``), the
    first call of each function only: ``(probe, positions among the arrays, moved arrays,
    result, result positions to compare)`` per probe TF gave a comparable result for."""
    tf = _tf()
    float_at = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    if not float_at:
        return []
    found = []
    recorder.replaying = True
    try:
        for probe, floats in probe_inputs([arrays[i] for i in float_at]):
            moved = list(arrays)
            for i, array in zip(float_at, floats):
                moved[i] = array
            args, kwargs = unpack(inputs, moved, tf.constant)
            try:
                out = fn(*args, **kwargs)
            except Exception:  # noqa: BLE001 - the function refuses this input: no probe
                continue
            leaves = _result_leaves(out)
            if leaves is None:
                continue
            compared = judged_leaves(leaves, set())
            if compared:
                found.append((probe, float_at, floats, out, compared))
    finally:
        recorder.replaying = False
    return found


def _variants(recorder: Any, fn: Any, inputs: list, arrays: list[np.ndarray]) -> list[dict]:
    """The function again with one plain argument changed (``variants.py``), the
    first call of each function only: ``{"name", "param", "inputs", "outputs"}`` per variant TF
    returned arrays for (their arrays appended to ``arrays``)."""
    tf = _tf()
    found = []
    recorder.replaying = True
    try:
        for variant in argument_variants(fn, inputs):
            args, kwargs = unpack(variant["inputs"], arrays, tf.constant)
            try:
                out = fn(*args, **kwargs)
            except Exception:  # noqa: BLE001 - a configuration the function refuses: no variant
                continue
            if _result_leaves(out) is None:
                continue
            found.append({**variant, "outputs": pack(_as_arrays(out), arrays)})
    finally:
        recorder.replaying = False
    return found


def record_function_call(recorder: Any, module: str, name: str, fn: Any, args: tuple, kwargs: dict, result: Any) -> None:
    """Called after ``fn(*args, **kwargs)`` returned ``result`` in a test."""
    tf = _tf()
    target = f"{module}:{name}"
    if not tf.executing_eagerly() or recorder.per_target.get(target, 0) >= recorder.max_per_target:
        return
    first = _result_leaves(result)
    if first is None:
        return  # not array out: not a case (a dataset, a model, a Python number)
    try:
        inputs = pack([list(args), dict(kwargs)], arrays := [], argument_array)
    except Unpackable:
        return  # not array in
    signature = json.dumps(["function", target, inputs, [(a.shape, str(a.dtype), hashlib.sha256(a.tobytes()).hexdigest()) for a in arrays]],
                           sort_keys=True, default=str)
    if signature in recorder.seen:
        return
    recorder.seen.add(signature)
    origin = {"kind": "function", "module": module, "name": name}
    recorder.replaying = True
    started = time.perf_counter()
    try:
        with recorder.draw_tape.recording():
            again = _result_leaves(fn(*args, **kwargs))
    except Exception:  # noqa: BLE001 - the test's own call succeeded; a second one is ours
        again = None
    finally:
        recorder.replaying = False
    seconds_per_call = time.perf_counter() - started
    # samplers tern cannot inject that gave the same result twice here may not on other inputs
    opaque_draws = recorder.draw_tape.other
    draws: list = []
    samples = None
    if again is None or len(again) != len(first) or not all(
            a.shape == b.shape and np.array_equal(a, b, equal_nan=True) for a, b in zip(first, again)):
        drawn = _with_draws(recorder, fn, args, kwargs)
        if drawn is not None:
            result, draws = drawn
        elif (samples := _sample(recorder, fn, args, kwargs, first, again, seconds_per_call)) is None:
            recorder.skip(origin, "stochastic: two calls on the same arguments differ")
            return
    first_call = target not in recorder.probed_functions
    recorder.probed_functions.add(target)
    plain = first_call and not draws and not opaque_draws and not samples
    probes = _probe(recorder, fn, inputs, arrays) if plain else []
    variants = _variants(recorder, fn, inputs, arrays) if plain else []
    outputs = pack(_as_arrays(result), arrays)
    probes = [{"name": probe, "inputs": pack(floats, arrays), "outputs": pack(_as_arrays(out), arrays),
               "compared": compared, "float_at": float_at} for probe, float_at, floats, out, compared in probes]
    ident = hashlib.sha256(signature.encode()).hexdigest()[:16]
    meta = {"id": ident, "kind": "function", "target": target, "origin": origin, "inputs": inputs,
            "outputs": outputs, "layer": name, **({"probes": probes} if probes else {}),
            **({"variants": variants} if variants else {}),
            **({"draws": pack_draws(draws, arrays)} if draws else {}),
            **({"stochastic": samples["leaves"], "samples": {"leaves": samples["leaves"], "runs": pack(samples["runs"], arrays)}}
               if samples else {}),
            "defaults": function_defaults(fn)}
    write_case(recorder.out, ident, meta, arrays)
    recorder.per_target[target] = recorder.per_target.get(target, 0) + 1
    recorder.cases.append({"id": ident, "target": target})
