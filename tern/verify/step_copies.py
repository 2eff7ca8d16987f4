"""TF worker, after the tests: run a recorded step session on copies and write its case.

Per (model, optimizer) pair of the step (one, or a GAN's two): the model rebuilt from its
package factory or class with the snapshot weights assigned, and a fresh optimizer from the
recorded config, built eagerly (a ``tf.function`` step may create variables on its first
trace only). The original step runs on them with the recorded arguments; after each step
its returned value and every weight are kept.

The copy is trusted only when a second copy gives bit-identical results and it reproduces
the test's own first step (same returned value and weights, to ``COPY_RTOL``/``COPY_ATOL``:
the same graph on the same values); otherwise the test changed the model after building it,
and the session is not compared. Two copies that differ mean the step draws (``tf.random``):
it runs again eagerly with TF's draws recorded per step (``draws.py``), and once more with
them handed back, which must be bit-identical; the case keeps the draws for the replay to
inject. The test's own step drew other numbers, so that one is not compared then.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import json
import sys
from typing import Any

import numpy as np

from tern.verify.arrays import build, origin_target, pack, shift
from tern.verify.draws import DrawsDoNotLineUp, DrawTape, pack_draws
from tern.verify.passes import ReplayedPasses
from tern.verify.port import keras_units
from tern.verify.step_objects import rebuild_problem

COPY_RTOL, COPY_ATOL = 1e-6, 1e-7
RANDOM_ATTRIBUTES = ("rate", "dropout", "recurrent_dropout", "stddev")


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
    if not session.stepped:
        return "the test's own first step raised"
    several = len(session.roles) > 1
    sources = [(f"optimizer {role.optimizer_param!r}" if several else "optimizer", role.optimizer_source,
                role.optimizer_config) for role in session.roles if role.optimizer is not None]
    sources += [(f"argument {name!r}", entry["__keras_loss__"], entry["config"])
                for packed in session.packed for name, entry in packed.items() if "__keras_loss__" in entry]
    for what, source, config in sources:
        problem = rebuild_problem(source, config)
        if problem:
            return f"{what}: {problem}"
    made = len(session.calls)
    if session.step.loop:
        indices, batches = [0], "the test's first call (its own steps inside)"
    elif made >= steps:
        indices, batches = list(range(steps)), f"calls 1-{steps} of the test"
    else:
        indices, batches = [0] * steps, f"call 1's arguments repeated {steps} times (the test made {made} call(s))"
    drawing = bool(session.step.draws or any(random_layer(role.model) for role in session.roles))
    runs = _two_runs(session, indices, drawing)
    if isinstance(runs, str):
        return runs
    if not drawing and any(_first_difference(session, a, b[0], b[1], exact=True) for a, b in zip(runs[0], runs[3])):
        drawing = True  # two runs from the same weights differ: the step draws after all
        runs = _two_runs(session, indices, drawing)
        if isinstance(runs, str):
            return runs
    first, inputs, draws, second = runs
    if drawing:
        # handed back, TF's draws must reproduce the first run exactly
        for t, (a, b) in enumerate(zip(first, second), start=1):
            differs = _first_difference(session, a, b[0], b[1], exact=True)
            if differs:
                return (f"two runs from the same weights, arguments and random draws differ at step {t} ({differs}): "
                        "the step is random in a way tern cannot replay")
    else:
        # the test's own first step drew nothing: a copy must reproduce it
        differs = _first_difference(session, first[0], session.first_result, [r.first_after for r in session.roles],
                                    exact=False)
        if differs:
            return (f"a copy rebuilt from {session.origin['name']} does not reproduce the test's first step ({differs}): "
                    "the test changes the model after building it")
    return _case(session, indices, batches, first, inputs, draws)


def _two_runs(session: Any, indices: list[int], drawing: bool) -> tuple | str:
    """Two trajectories from the same copies: ``(first, its model inputs, draws, second)``. A
    drawing step's first run records TF's draws per step and its second gets them back."""
    first, inputs, drawn = _trajectory(session, indices, capture=True, draws=[] if drawing else None)
    if isinstance(first, str):
        return first
    second, _, _ = _trajectory(session, indices, capture=False, draws=drawn if drawing else None)
    if isinstance(second, str):
        return second
    return first, inputs, drawn if drawing else None, second


def random_layer(model: Any) -> str:
    """What in the model draws in a training step ("" when nothing does)."""
    layers = model._flatten_layers(include_self=False, recursive=True) if hasattr(model, "_flatten_layers") else []
    for layer in layers:
        cls = type(layer)
        if not cls.__module__.startswith(("keras", "tf_keras")):
            continue
        for attr in RANDOM_ATTRIBUTES:
            value = getattr(layer, attr, 0)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                what = "dropout rate" if "dropout" in attr or attr == "rate" else attr
                return f"{what} {value:g} in layer {layer.name} ({cls.__name__})"
        if cls.__name__.startswith("Random"):
            return f"random layer {layer.name} ({cls.__name__})"
    return ""


def _rebuild(role: Any) -> Any:
    def unwrapped(origin: dict) -> Any:
        target = origin_target(origin)
        return getattr(target, "__wrapped__", target)  # the forward recorder's factory wrapper

    copy = build(role.origin, [], unwrapped)
    if len(copy.weights) != len(role.weights) and role.build_config:
        copy.build_from_config(role.build_config)
    return copy


def _copies(session: Any) -> list[tuple[Any, Any]] | str:
    """Per role: the model rebuilt with the snapshot weights and a fresh optimizer, built."""
    made = []
    for role in session.roles:
        copy = _rebuild(role)
        weights = list(copy.weights)
        if [tuple(v.shape) for v in weights] != [w.shape for w in role.weights]:
            return f"a copy rebuilt from {role.origin['name']} has other weights ({len(weights)} vs {len(role.weights)})"
        for variable, flag in zip(weights, role.trainable):  # flags the test set after building (layers frozen)
            variable.trainable = flag
        for variable, value in zip(weights, role.weights):
            variable.assign(value)
        if role.optimizer is None:  # a loop that makes its own
            made.append((copy, None))
            continue
        optimizer = type(role.optimizer).from_config(dict(role.optimizer_config))
        optimizer.build(copy.trainable_variables)
        made.append((copy, optimizer))
    return made


def _trajectory(session: Any, indices: list[int], capture: bool, draws: list | None = None) -> tuple[list | str, Any, list]:
    """Per step: (returned value, per role the weights in ``model.weights`` order, per role the
    weights as units, optimizer updates so far); the models' first inputs when ``capture``; and
    the draws per step.

    ``draws``: None, the step runs as the test ran it; ``[]``, it runs eagerly with TF's draws
    recorded (``draws.py``), into the third value; a list per step, those draws handed back."""
    tf = _tf()
    copies = _copies(session)
    if isinstance(copies, str):
        return copies, None, []
    inputs: dict = {}
    undo = _watch_first_calls([model for model, _ in copies], inputs) if capture else (lambda: None)
    out, drawn = [], []
    tape = DrawTape()
    made: list[Any] = [optimizer for _, optimizer in copies if optimizer is not None]
    try:
        with contextlib.ExitStack() as stack:
            if len(made) < len(copies):  # a loop that makes its own optimizer: its updates count too
                stack.enter_context(_optimizers_made(made))
            if draws is not None:
                stack.enter_context(tape.installed())
                stack.enter_context(_eagerly())
            for t, i in enumerate(indices):
                call = session.calls[i]
                arguments = dict(call.arguments)
                for name, recorded in session.passes.items():  # a loop's dataset: the test's passes
                    arguments[name] = ReplayedPasses(recorded.passes, _as_tensors)
                for role, (model, optimizer) in zip(session.roles, copies):
                    arguments[role.model_param] = model
                    if optimizer is not None:
                        arguments[role.optimizer_param] = optimizer
                bound = inspect.BoundArguments(call.signature, arguments)
                if draws is None:
                    result = session.inner(*bound.args, **bound.kwargs)
                elif not draws:
                    with tape.recording():
                        result = session.inner(*bound.args, **bound.kwargs)
                    if tape.other:
                        return (f"the step draws {tape.other} time(s) from samplers tern cannot hand to the translation "
                                "(integer, truncated or categorical draws, tf.random.Generator)"), None, []
                    drawn.append(list(tape.draws))
                else:
                    try:
                        with tape.replaying(draws[t]):
                            result = session.inner(*bound.args, **bound.kwargs)
                            if tape.left:
                                raise DrawsDoNotLineUp(f"TF drew {tape.left} fewer than when recorded")
                    except DrawsDoNotLineUp as exc:
                        return f"step {t + 1}: TF's recorded draws do not replay to TF itself ({exc})", None, []
                undo()
                out.append((tf.nest.map_structure(as_numpy, result),
                            [[np.array(v.numpy()) for v in model.weights] for model, _ in copies],
                            [keras_units(model) for model, _ in copies],
                            max((int(np.asarray(optimizer.iterations)) for optimizer in made), default=0)))
    finally:
        undo()
    if capture and len(inputs) < len(copies):
        missing = next(role.model_param for i, role in enumerate(session.roles) if i not in inputs)
        return f"the step never called the model {missing!r}", None, []
    return out, [inputs[i] for i in range(len(copies))] if capture else None, drawn


@contextlib.contextmanager
def _optimizers_made(into: list):
    """Every Keras optimizer constructed meanwhile (Keras 3's, or legacy ``tf_keras``'s when the
    package uses it), appended to ``into``."""
    bases = []
    for module, name in (("keras.src.optimizers.base_optimizer", "BaseOptimizer"),
                         ("tf_keras.src.optimizers.optimizer", "Optimizer")):
        if module.split(".")[0] in sys.modules:
            with contextlib.suppress(ImportError, AttributeError):
                bases.append(getattr(importlib.import_module(module), name))

    def counting(original: Any) -> Any:
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            into.append(self)

        return __init__

    originals = [(base, base.__dict__["__init__"]) for base in bases if "__init__" in base.__dict__]
    for base, original in originals:
        base.__init__ = counting(original)
    try:
        yield
    finally:
        for base, original in originals:
            base.__init__ = original


def _as_tensors(element: Any) -> Any:
    """A recorded dataset element as the tensors the dataset yielded."""
    return _tf().nest.map_structure(_tf().constant, element)


@contextlib.contextmanager
def _eagerly():
    """``tf.function`` bodies run as Python: the draw tape sees each draw's value."""
    tf = _tf()
    before = tf.config.functions_run_eagerly()
    tf.config.run_functions_eagerly(True)
    try:
        yield
    finally:
        tf.config.run_functions_eagerly(before)


def _case(session: Any, indices: list[int], batches: str, trajectory: list, inputs: list, draws: list | None
          ) -> tuple[dict, list[np.ndarray]]:
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
    after = [{"result": pack(result, arrays, as_numpy), "units": [units(role_units) for role_units in step_units]}
             for result, _, step_units, _ in trajectory]
    roles = [{"model_param": role.model_param, "optimizer_param": role.optimizer_param, "origin": role.origin,
              "optimizer": role.optimizer_source, "model_inputs": pack(model_inputs, arrays, as_numpy),
              "units": units(role.units), "name_units": units(role.name_units), "keras_names": role.names,
              "keras_trainable": list(role.trainable)} for role, model_inputs in zip(session.roles, inputs)]
    meta = {
        "target": session.target, "function": session.step.name, "params": list(session.step.params),
        "origin": session.origin,
        "optimizer": " + ".join(role.optimizer_source or "an optimizer the loop makes" for role in session.roles),
        "steps": len(indices), "batches": batches, "calls": calls, "roles": roles, "after": after,
        "loop": session.step.loop,
        "updates": trajectory[-1][3],  # optimizer updates in all (a loop's own steps), which scale its tolerance
    }
    if draws is not None:
        meta["draws"] = [pack_draws(step_draws, arrays) for step_draws in draws]
    digest = hashlib.sha256(json.dumps(meta, sort_keys=True, default=str).encode())
    for array in arrays:
        digest.update(np.ascontiguousarray(array).tobytes())
    meta["id"] = "step-" + digest.hexdigest()[:16]
    return meta, arrays


def _first_difference(session: Any, step: tuple, result: Any, weights: list[list[np.ndarray]], exact: bool) -> str:
    """The first returned value or weight of ``step`` that differs from ``result``/``weights`` (per role)."""
    tf = _tf()
    got_result, got_weights = step[0], step[1]

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
    for role, got, want in zip(session.roles, got_weights, weights):
        name = next((name for name, a, b in zip(role.names, got, want) if differ(a, b)), "")
        if name:
            return name
    return ""


def _watch_first_calls(models: list[Any], into: dict):
    """Keep each model's first top-level call, ``into[i]`` for ``models[i]``, as zero arrays of its
    inputs' shapes (the translated model's ``init`` needs them); returns the undo."""
    tf = _tf()

    def zeros(value: Any) -> Any:
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            dtype = value.dtype.as_numpy_dtype if hasattr(value.dtype, "as_numpy_dtype") else np.dtype(value.dtype)
            return np.zeros(tuple(1 if d is None else int(d) for d in value.shape), dtype)
        return value

    originals: dict[type, Any] = {}
    for model in models:
        cls = next(c for c in type(model).__mro__ if "__call__" in c.__dict__ and c.__module__.split(".")[0] in {"keras", "tf_keras"})
        originals.setdefault(cls, cls.__dict__["__call__"])

    def watching(original: Any):
        def __call__(layer, *args, **kwargs):
            for i, model in enumerate(models):
                if layer is model and i not in into:
                    into[i] = tf.nest.map_structure(zeros, [list(args), dict(kwargs)])
            return original(layer, *args, **kwargs)

        return __call__

    for cls, original in originals.items():
        setattr(cls, "__call__", watching(original))
    done = []

    def undo() -> None:
        if not done:
            for cls, original in originals.items():
                setattr(cls, "__call__", original)
            done.append(True)

    return undo
