"""TF worker task: Keras's half of a search round (``search.py``).

Per case, the Keras layer is built again from its recording under a float64 policy with
the recorded weights (``reference.rebuilt_layer``); for a package function's case, the
original function is called on the recorded arguments with float64 ones in place of the
float ones. At the point the JAX job kept, Keras's ``J^T r`` completes the ascent
direction; Keras's float64 outputs at the points one step along it are what the next JAX
job compares. Every layer call starts from the recorded weights (a training call moves a
layer's statistics). A layer or function that fixes its own float dtype is not searched:
in float32 the search would climb two kernels' rounding.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tern.sandbox.jobs import OUTPUT
from tern.verify.arrays import origin_target, pack, read_case, replaced, unpack, write_case
from tern.verify.between_jobs import kept
from tern.verify.probes import judged_leaves
from tern.verify.reference import float64_policy, rebuilt_layer, restore_weights
from tern.verify.search import next_points
from tern.verify.tf_orders import sorted_orders


def search_keras(payload: dict, scratch: Path) -> dict:
    """Task: for each id of ``payload["cases"]`` (recorded in ``payload["dir"]``, its point
    written by the JAX job in ``payload["from"]``), the next points and Keras there, written
    to ``scratch / OUTPUT`` under the id. Returns, per id, "ok" or why there are none."""
    directory, source, out = Path(payload["dir"]), Path(payload["from"]), scratch / OUTPUT
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for ident in payload["cases"]:
        if not (source / f"{ident}.json").exists():
            results[ident] = "no point from the translation's side"
            continue
        try:
            point, point_arrays = read_case(source, ident)
            with float64_policy(payload.get("keras", "keras3")), sorted_orders():
                # the recording's directory is named by its content's hash: what is built
                # from it is kept for the next round (``between_jobs.py``)
                meta, call = kept(("search", str(directory), ident, payload.get("keras", "keras3")),
                                  lambda: _built(directory, ident))
                found, found_arrays = _next(meta, call, point, point_arrays, payload["round"])
            write_case(out, ident, found, found_arrays)
            results[ident] = "ok"
        except Exception:  # noqa: BLE001 - this case is not searched further; the reason comes back
            results[ident] = traceback.format_exc(limit=2).strip().splitlines()[-1][:300]
    return {"cases": results}


def _keras_layer(meta: dict, arrays: Any) -> Callable:
    """``call(floats, cotangents) -> (outputs, J^T c per float input or [])`` on the Keras
    layer rebuilt from the recording, from its recorded weights every time."""
    import tensorflow as tf

    layer, args, kwargs, flat_in, positions, recorded = rebuilt_layer(meta, arrays)

    def call(floats: list[np.ndarray], cotangents: list | None) -> tuple[Any, list]:
        tensors = [tf.constant(a) for a in floats]
        leaves = list(flat_in)
        for i, tensor in zip(positions, tensors):
            leaves[i] = tensor
        call_args, call_kwargs = tf.nest.pack_sequence_as([list(args), dict(kwargs)], leaves)
        restore_weights(layer, recorded)
        return _traced(lambda: layer(*call_args, **call_kwargs), tensors, floats, cotangents)

    return call


def _keras_function(meta: dict, arrays: Any) -> Callable:
    """The same for the original package function of a function case, called on the
    recorded arguments with the float ones replaced."""
    import tensorflow as tf

    function = origin_target(meta["origin"])
    float_at = meta["probes"][0]["float_at"]
    loaded = replaced(arrays, [], [])  # read once

    def call(floats: list[np.ndarray], cotangents: list | None) -> tuple[Any, list]:
        tensors = [tf.constant(a) for a in floats]
        moved = replaced(loaded, float_at, tensors)
        call_args, call_kwargs = unpack(meta["inputs"], moved, lambda a: a if tf.is_tensor(a) else tf.constant(a))
        return _traced(lambda: function(*call_args, **call_kwargs), tensors, floats, cotangents)

    return call


def _traced(compute: Callable, tensors: list, floats: list[np.ndarray], cotangents: list | None) -> tuple[Any, list]:
    """``compute()``'s outputs (as arrays) and, given ``cotangents``, the gradient of
    ``sum(outputs * cotangents)`` per float input."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        for tensor in tensors:
            tape.watch(tensor)
        outputs = compute()
        out_leaves = tf.nest.flatten(outputs)
        if any(o.dtype.is_floating and o.dtype != tf.float64 if tf.is_tensor(o)
               else np.asarray(o).dtype.kind == "f" and np.asarray(o).dtype != np.float64 for o in out_leaves):
            raise ValueError("a float output is not float64: the code fixes its own dtype")
        if cotangents is None:
            return tf.nest.map_structure(np.asarray, outputs), []
        loss = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float64) * c) for o, c in zip(out_leaves, cotangents)
                         if c is not None] or [tf.constant(0.0, tf.float64)])
    grads = tape.gradient(loss, tensors)
    return outputs, [np.zeros_like(a) if g is None else np.asarray(tf.convert_to_tensor(g)) for a, g in zip(floats, grads)]


def _built(directory: Path, ident: str) -> tuple[dict, Callable]:
    """``(meta, call)`` of a recorded case: the Keras layer rebuilt (under the float64
    policy the caller set) or the original function."""
    meta, arrays = read_case(directory, ident)
    return meta, (_keras_function if meta.get("kind") == "function" else _keras_layer)(meta, arrays)


def _next(meta: dict, call: Callable, point: dict, point_arrays: Any, round_index: int) -> tuple[dict, list]:
    import tensorflow as tf

    x = [np.asarray(a, np.float64) for a in unpack(point["x"], point_arrays)]
    if point.get("g") is None:  # the translation could not be differentiated there: no ascent
        ascent = [np.zeros_like(a) for a in x]
    else:
        residual = unpack(point["r"], point_arrays)
        theirs = [np.asarray(g, np.float64) for g in unpack(point["g"], point_arrays)]
        _, keras_grads = call(x, residual)
        ascent = [t - k for t, k in zip(theirs, keras_grads)]
    left_out = set(meta.get("stochastic", []))
    found_arrays: list[np.ndarray] = []
    probes = []
    for name, moved in next_points(round_index, x, ascent):
        try:
            outputs, _ = call(moved, None)
        except Exception:  # noqa: BLE001 - Keras refuses this input (a checked range): no point here
            continue
        compared = judged_leaves(tf.nest.flatten(outputs), left_out)
        if compared:
            probes.append({"name": name, "inputs": pack(moved, found_arrays), "outputs": pack(outputs, found_arrays),
                           "compared": compared})
    return {"probes": probes}, found_arrays
