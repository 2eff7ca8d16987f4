"""TF worker task: the Keras float64 reference of recorded calls whose replay failed on
values alone.

A float32 result is one rounding of the true value among many: a bias gradient summed
over 2x80x80 positions comes out of TF's convolution kernels (one summation order) and
XLA's (another) differing by more than any multiple of the translation's own rounding,
which is what ``replay.py`` measures first. Both sides computed in float64 settle it: a
correct translation agrees with Keras to float64 rounding, a wrong one is as far off as
in float32. So, per case: build the layer again the way the test built it, under a
float64 dtype policy, give it the recorded weights (cast), and record outputs and
gradients of ``sum(outputs * cotangent)`` with the recorded cotangents, in the recorded
case's layout. A case this cannot rebuild faithfully (other weight shapes, a layer that
fixes its own dtype, a call that mixes float32 in) gets no reference and keeps its
float32 verdict; the reason comes back with the result.
"""

from __future__ import annotations

import contextlib
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from tern.sandbox.jobs import OUTPUT
from tern.verify.arrays import build, pack, read_case, shift, unpack, write_case
from tern.verify.port import keras_units
from tern.verify.tf_orders import sorted_orders
from tern.weights.port import variable_path


def reference_float64(payload: dict, scratch: Path) -> dict:
    """Task: ``payload["cases"]`` (ids in the recording ``payload["dir"]``) run again in
    float64, each written to ``scratch / OUTPUT`` under its id. Returns, per id, "ok" or
    why there is no reference."""
    def wide(meta: dict, arrays: Any) -> tuple[dict, list[np.ndarray]]:
        with float64_policy(payload.get("keras", "keras3")):
            return _reference(meta, arrays)

    return per_case(payload, scratch, wide)


def per_case(payload: dict, scratch: Path, make: Any) -> dict:
    """Each recorded case of ``payload["cases"]`` (ids in ``payload["dir"]``) given to ``make``
    (with TF's unordered ops sorted), its ``(meta, arrays)`` written to ``scratch / OUTPUT``
    under its id: ``{"cases": {id: "ok" or why not}}``. A case that fails leaves the verdict
    made without it standing."""
    directory, out = Path(payload["dir"]), scratch / OUTPUT
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for ident in payload["cases"]:
        try:
            meta, arrays = read_case(directory, ident)
            with sorted_orders():
                made_meta, made_arrays = make(meta, arrays)
            write_case(out, ident, made_meta, made_arrays)
            results[ident] = "ok"
        except Exception:  # noqa: BLE001 - nothing made for this case: the first verdict stands
            results[ident] = traceback.format_exc(limit=2).strip().splitlines()[-1][:300]
    return {"cases": results}


@contextlib.contextmanager
def float64_policy(flavour: str):
    """Layers built in the block create float64 weights and compute in float64."""
    if flavour == "tf_keras":
        import tf_keras

        policy = (tf_keras.mixed_precision.global_policy, tf_keras.mixed_precision.set_global_policy)
        floatx = (tf_keras.backend.floatx, tf_keras.backend.set_floatx)
    else:
        import keras

        policy = (keras.config.dtype_policy, keras.config.set_dtype_policy)
        floatx = (keras.config.floatx, keras.config.set_floatx)
    before = [get() for get, _ in (policy, floatx)]
    floatx[1]("float64")
    policy[1]("float64")
    try:
        yield
    finally:
        policy[1](before[0])
        floatx[1](before[1])


def _wide(value: Any) -> Any:
    return value.astype(np.float64) if isinstance(value, np.ndarray) and value.dtype.kind == "f" else value


def rebuilt_layer(meta: dict, arrays: Any, as_input: Any = _wide) -> tuple:
    """The recorded case's Keras layer built again (under the dtype policy in force) with
    the recorded weights: ``(layer, args, kwargs, flat inputs, float input positions,
    recorded weights)``."""
    import tensorflow as tf

    if "weights" not in meta:
        raise ValueError("the recording keeps no Keras weights for this case")
    layer = build(meta["origin"], arrays)
    args, kwargs = unpack(meta["inputs"], arrays, as_input)
    flat_in = tf.nest.flatten([list(args), dict(kwargs)])
    present = [i for i, x in enumerate(flat_in) if x is not None]
    float_positions = [present[i] for i in meta["float_inputs"]]
    layer(*args, **kwargs)  # builds the weights
    recorded = [arrays[f"a{w['array']}"] for w in meta["weights"]]
    if [tuple(v.shape) for v in layer.weights] != [r.shape for r in recorded]:
        raise ValueError("rebuilt, the layer has other weights than the recorded ones")
    restore_weights(layer, recorded)
    return layer, args, kwargs, flat_in, float_positions, recorded


def restore_weights(layer: Any, recorded: list[np.ndarray]) -> None:
    for variable, value in zip(layer.weights, recorded):
        variable.assign(value.astype(variable.dtype.name if hasattr(variable.dtype, "name") else variable.dtype))


def _reference(meta: dict, arrays: Any) -> tuple[dict, list[np.ndarray]]:
    import tensorflow as tf

    layer, args, kwargs, flat_in, float_positions, recorded = rebuilt_layer(meta, arrays)
    variables = list(layer.weights)
    cotangents = [None if c is None else np.asarray(c, np.float64) for c in unpack(meta["cotangents"], arrays)]
    watched = {i: tf.constant(flat_in[i]) for i in float_positions}
    leaves = [watched.get(i, x) for i, x in enumerate(flat_in)]
    call_args, call_kwargs = tf.nest.pack_sequence_as([list(args), dict(kwargs)], leaves)
    with tf.GradientTape() as tape:
        for tensor in watched.values():
            tape.watch(tensor)
        outputs = layer(*call_args, **call_kwargs)
        out_leaves = tf.nest.flatten(outputs)
        if any(o.dtype != tf.float64 for o, c in zip(out_leaves, cotangents) if c is not None):
            raise ValueError("a float output is not float64: the layer fixes its own dtype")
        loss = tf.add_n([tf.reduce_sum(o * c) for o, c in zip(out_leaves, cotangents) if c is not None]
                        or [tf.constant(0.0, tf.float64)])
    trainable = list(layer.trainable_variables)
    grads = tape.gradient(loss, [watched[i] for i in float_positions] + trainable)
    dense = [None if g is None else np.asarray(tf.convert_to_tensor(g)) for g in grads]
    by_id = {id(v): g for v, g in zip(trainable, dense[len(float_positions):]) if g is not None}
    ref_arrays: list[np.ndarray] = []
    ref_meta = {"id": meta["id"], "outputs": pack(tf.nest.map_structure(np.asarray, outputs), ref_arrays),
                "input_grads": pack(dense[:len(float_positions)], ref_arrays)}
    units = keras_units(layer, lambda v: by_id.get(id(v), np.zeros(tuple(v.shape), np.float64)))
    offset = len(ref_arrays)
    unit_arrays: list[np.ndarray] = []
    ref_meta["grad_units"] = shift([{**u, "tree": pack(u["tree"], unit_arrays)} for u in units], offset)
    ref_meta["weights_paths"] = [variable_path(v) for v in variables]
    every = ref_arrays + unit_arrays
    ref_meta["probes"] = _probes(meta, arrays, layer, recorded, flat_in, float_positions, args, kwargs, every)
    return ref_meta, every


def _probes(meta: dict, arrays: Any, layer: Any, recorded: list[np.ndarray], flat_in: list, float_positions: list[int],
            args: Any, kwargs: Any, every: list[np.ndarray]) -> list[dict]:
    """The case's probes (``probes.py``) in float64 too, outputs only, each from the recorded
    weights (a training call may have moved the layer's state)."""
    import tensorflow as tf

    found = []
    for probe in meta.get("probes", []):
        restore_weights(layer, recorded)
        leaves = list(flat_in)
        for i, array in zip(float_positions, unpack(probe["inputs"], arrays, _wide)):
            leaves[i] = tf.constant(array)
        call_args, call_kwargs = tf.nest.pack_sequence_as([list(args), dict(kwargs)], leaves)
        outputs = layer(*call_args, **call_kwargs)
        found.append({"name": probe["name"], "outputs": pack(tf.nest.map_structure(np.asarray, outputs), every)})
    return found
