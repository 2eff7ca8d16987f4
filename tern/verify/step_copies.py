"""TF worker, after the tests: run a recorded step session on copies and write its case.

The copy is the model rebuilt from its package factory or class with the snapshot weights
assigned, and a fresh optimizer from the recorded config, built eagerly (a ``tf.function``
step may create variables on its first trace only). The original step runs on them with
the recorded arguments; after each step its returned value and every weight are kept.

The copy is trusted only when it reproduces the test's own first step (same returned
value and weights, to ``COPY_RTOL``/``COPY_ATOL``: the same graph on the same values) and a
second copy gives bit-identical results: otherwise the test changed the model after
building it, or the step is random, and the session is not compared.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
from typing import Any

import numpy as np

from tern.verify.arrays import pack, shift, unpack
from tern.verify.port import keras_units
from tern.verify.step_objects import rebuild_problem

COPY_RTOL, COPY_ATOL = 1e-6, 1e-7


def _tf():
    import tensorflow as tf

    return tf


def as_numpy(value: Any) -> Any:
    """Tensors and variables as NumPy arrays; anything else unchanged."""
    if hasattr(value, "numpy") and hasattr(value, "dtype"):
        return np.asarray(value.numpy())
    return value


def run_session(session: Any, steps: int) -> tuple[dict, list[np.ndarray]] | str:
    """The session's case (meta, arrays) over ``steps`` steps, or why it is not compared."""
    if session.first_after is None:
        return "the test's own first step raised"
    sources = [("optimizer", session.optimizer_source, session.optimizer_config)]
    sources += [(f"argument {name!r}", entry["__keras_loss__"], entry["config"])
                for packed in session.packed for name, entry in packed.items() if "__keras_loss__" in entry]
    for what, source, config in sources:
        problem = rebuild_problem(source, config)
        if problem:
            return f"{what}: {problem}"
    made = len(session.calls)
    if made >= steps:
        indices, batches = list(range(steps)), f"calls 1-{steps} of the test"
    else:
        indices, batches = [0] * steps, f"call 1's arguments repeated {steps} times (the test made {made} call(s))"
    first, inputs = _trajectory(session, indices, capture=True)
    if isinstance(first, str):
        return first
    second, _ = _trajectory(session, indices, capture=False)
    if isinstance(second, str):
        return second
    differs = _first_difference(session.names, first[0], session.first_result, session.first_after, exact=False)
    if differs:
        return (f"a copy rebuilt from {session.origin['name']} does not reproduce the test's first step ({differs}): "
                "the test changes the model after building it")
    for t, (a, b) in enumerate(zip(first, second), start=1):
        differs = _first_difference(session.names, a, b[0], b[1], exact=True)
        if differs:
            return f"two runs from the same weights and arguments differ at step {t} ({differs}): the step is random"
    return _case(session, indices, batches, first, inputs)


def _rebuild(session: Any) -> Any:
    origin = session.origin
    target = importlib.import_module(origin["module"])
    for part in origin["name"].split("."):
        target = getattr(target, part)
    target = getattr(target, "__wrapped__", target)  # the forward recorder's factory wrapper
    copy = target(*unpack(origin.get("args", []), []), **unpack(origin.get("kwargs", {}), []))
    if len(copy.weights) != len(session.weights) and session.build_config:
        copy.build_from_config(session.build_config)
    return copy


def _trajectory(session: Any, indices: list[int], capture: bool) -> tuple[list | str, Any]:
    """Per step: (returned value, weights in ``model.weights`` order, weights as units)."""
    tf = _tf()
    copy = _rebuild(session)
    weights = list(copy.weights)
    if [tuple(v.shape) for v in weights] != [w.shape for w in session.weights]:
        return f"a copy rebuilt from {session.origin['name']} has other weights ({len(weights)} vs {len(session.weights)})", None
    for variable, flag in zip(weights, session.trainable):  # flags the test set after building (layers frozen)
        variable.trainable = flag
    for variable, value in zip(weights, session.weights):
        variable.assign(value)
    optimizer = type(session.optimizer).from_config(dict(session.optimizer_config))
    optimizer.build(copy.trainable_variables)
    inputs: dict = {}
    undo = _watch_first_call(copy, inputs) if capture else (lambda: None)
    out = []
    try:
        for i in indices:
            call = session.calls[i]
            arguments = {**call.arguments, session.step.model: copy, session.step.optimizer: optimizer}
            bound = inspect.BoundArguments(call.signature, arguments)
            result = session.inner(*bound.args, **bound.kwargs)
            undo()
            out.append((tf.nest.map_structure(as_numpy, result), [np.array(v.numpy()) for v in weights], keras_units(copy)))
    finally:
        undo()
    if capture and "value" not in inputs:
        return "the step never called the model", None
    return out, inputs.get("value")


def _case(session: Any, indices: list[int], batches: str, trajectory: list, inputs: Any) -> tuple[dict, list[np.ndarray]]:
    arrays: list[np.ndarray] = []

    def units(listed: list[dict]) -> list[dict]:
        return [{**u, "tree": pack(u["tree"], arrays)} for u in listed]

    calls = []
    for i in indices:
        call = {}
        for name, entry in session.packed[i].items():
            if "__keras_loss__" in entry:
                call[name] = {"__keras_loss__": entry["__keras_loss__"]}
            else:
                call[name] = shift(entry["value"], len(arrays))
                arrays.extend(entry["arrays"])
        calls.append(call)
    after = [{"result": pack(result, arrays, as_numpy), "units": units(step_units)} for result, _, step_units in trajectory]
    meta = {
        "target": session.target, "function": session.step.name, "params": list(session.step.params),
        "model_param": session.step.model, "optimizer_param": session.step.optimizer,
        "origin": session.origin, "optimizer": session.optimizer_source, "steps": len(indices),
        "batches": batches, "calls": calls, "model_inputs": pack(inputs, arrays, as_numpy),
        "units": units(session.units), "name_units": units(session.name_units),
        "keras_names": session.names, "keras_trainable": list(session.trainable), "after": after,
    }
    digest = hashlib.sha256(json.dumps(meta, sort_keys=True, default=str).encode())
    for array in arrays:
        digest.update(np.ascontiguousarray(array).tobytes())
    meta["id"] = "step-" + digest.hexdigest()[:16]
    return meta, arrays


def _first_difference(names: list[str], step: tuple, result: Any, weights: list[np.ndarray], exact: bool) -> str:
    """The first returned value or weight of ``step`` that differs from ``result``/``weights``."""
    tf = _tf()
    got_result, got_weights, _ = step

    def differ(a: Any, b: Any) -> bool:
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return True
        if exact:
            return not np.array_equal(a, b, equal_nan=True)
        return not np.allclose(a.astype(np.float64), b.astype(np.float64), rtol=COPY_RTOL, atol=COPY_ATOL, equal_nan=True)

    try:
        pairs = list(zip(tf.nest.flatten(got_result), tf.nest.flatten(result), strict=True))
    except ValueError:
        return "the returned values differ in structure"
    if any(differ(a, b) for a, b in pairs):
        return "the returned value"
    return next((name for name, a, b in zip(names, got_weights, weights) if differ(a, b)), "")


def _watch_first_call(model: Any, into: dict):
    """Keep the first top-level call of ``model`` as zero arrays of its inputs' shapes (the
    translated model's ``init`` needs them); returns the undo."""
    tf = _tf()
    cls = next(c for c in type(model).__mro__ if "__call__" in c.__dict__ and c.__module__.split(".")[0] in {"keras", "tf_keras"})
    original = cls.__dict__["__call__"]

    def zeros(value: Any) -> Any:
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            dtype = value.dtype.as_numpy_dtype if hasattr(value.dtype, "as_numpy_dtype") else np.dtype(value.dtype)
            return np.zeros(tuple(1 if d is None else int(d) for d in value.shape), dtype)
        return value

    def __call__(layer, *args, **kwargs):
        if layer is model and "value" not in into:
            into["value"] = tf.nest.map_structure(zeros, [list(args), dict(kwargs)])
        return original(layer, *args, **kwargs)

    setattr(cls, "__call__", __call__)
    done = []

    def undo() -> None:
        if not done:
            setattr(cls, "__call__", original)
            done.append(True)

    return undo
