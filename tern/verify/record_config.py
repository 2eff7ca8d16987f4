"""Record the training configuration a package function makes: optimizers, compiled loss and metrics.

``make_optimizers()`` returns Keras optimizers and ``compile_classifier(model)`` compiles a
model; neither returns arrays, so neither is a function case (``record_functions.py``), and
what they configure was only as checked as ``fit`` in the translated tests. A wrong Adam
epsilon, a bias correction off by one step, a top-k metric's ``k`` went through.

Recorded here, replayed by ``replay_config.py``, value by value:
- **an optimizer** (returned, or compiled into a model): a fresh copy (``from_config``)
  applies fixed gradient sequences to a fixed variable, at several gradient scales
  (``GRADIENT_SCALES``: at 1e-6 Adam's epsilon decides the step), and the variable after
  every step is kept; its learning-rate schedule, built-in or the package's own, is read
  at ``SCHEDULE_STEPS``;
- **the compiled loss** on fixed targets and predictions;
- **each compiled metric** (a Keras ``Metric`` object; strings are resolved by Keras from
  the data, so are not) over two batches, its result after each.
Targets and predictions are made for the model's output shape: predictions are softmax rows
(sigmoids for one unit), valid as probabilities and as logits; targets follow the loss's or
metric's name (sparse labels, one-hot rows, 0/1 values, or reals).
A model argument is recorded as a marker; the replay hands the translation a stand-in.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterator

import numpy as np

from tern.verify.arrays import Unpackable, pack, write_case
from tern.verify.record_functions import argument_array

#: gradient scales of the optimizer trajectories (one trajectory each, from the same start)
GRADIENT_SCALES = (1.0, 1e-3, 1e-6)
#: optimizer steps per trajectory
STEPS = 4
#: the steps a learning-rate schedule is read at: every one of the first 64, then further out
SCHEDULE_STEPS = (*range(64), 100, 250, 1_000, 10_000, 100_000)
#: rows per metric and loss batch
BATCH = 16
SEED = 20261203
MODEL = "__tern_model__"


def _keras_root(value: Any) -> str:
    return type(value).__module__.split(".")[0]


def is_keras_optimizer(value: Any) -> bool:
    return _keras_root(value) in {"keras", "tf_keras"} and any(
        cls.__name__ in {"Optimizer", "BaseOptimizer"} for cls in type(value).__mro__)


def leaves(value: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """``(path, leaf)`` through lists, tuples and dicts, optimizers (an optax transformation is a
    tuple) and models kept whole; the same paths on both sides."""
    if isinstance(value, (list, tuple)) and not (hasattr(value, "init") and hasattr(value, "update")):
        for i, item in enumerate(value):
            yield from leaves(item, (*path, i))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from leaves(item, (*path, str(key)))
    else:
        yield path, value


def _is_model(value: Any) -> bool:
    return hasattr(value, "compile") and hasattr(value, "call")


def compiled_state(args: tuple, kwargs: dict) -> dict[int, int]:
    """Before the call: each model argument's optimizer (by id), to tell a compile the call did."""
    return {id(leaf): id(getattr(leaf, "optimizer", None)) for _, leaf in leaves([list(args), dict(kwargs)]) if _is_model(leaf)}


def _fresh(optimizer: Any) -> Any:
    """A new optimizer from ``optimizer``'s config (a package's schedule class passed along)."""
    schedule = getattr(optimizer, "_learning_rate", None)
    custom = {type(schedule).__name__: type(schedule)} if _is_schedule(schedule) else None
    return type(optimizer).from_config(optimizer.get_config(), custom_objects=custom)


def _is_schedule(value: Any) -> bool:
    return callable(value) and hasattr(value, "get_config") and not hasattr(value, "numpy")


def _optimizer_record(optimizer: Any, arrays: list[np.ndarray]) -> dict:
    """The optimizer's fresh copies stepping a (3, 4) variable through ``STEPS`` gradients per
    scale, and its learning-rate schedule over ``SCHEDULE_STEPS`` when it has one."""
    import tensorflow as tf

    rng = np.random.default_rng(SEED)
    start = rng.standard_normal((3, 4)).astype(np.float32)
    trajectories = []
    for scale in GRADIENT_SCALES:
        copy = _fresh(optimizer)
        if _keras_root(optimizer) == "keras":
            import keras

            variable = keras.Variable(start.copy())
        else:
            variable = tf.Variable(start.copy())
        grads, params = [], []
        for _ in range(STEPS):
            grad = (scale * rng.standard_normal((3, 4))).astype(np.float32)
            copy.apply_gradients([(tf.constant(grad), variable)])
            grads.append(pack(grad, arrays))
            params.append(pack(np.asarray(variable.numpy()), arrays))
        trajectories.append({"scale": scale, "start": pack(start, arrays), "grads": grads, "params": params})
    record: dict = {"trajectories": trajectories}
    schedule = getattr(optimizer, "_learning_rate", None)
    if _is_schedule(schedule):
        steps = np.asarray(SCHEDULE_STEPS, np.int64)
        values = np.asarray([np.asarray(schedule(tf.constant(step, tf.int64))) for step in SCHEDULE_STEPS], np.float32)
        record["schedule"] = {"name": type(schedule).__name__, "steps": pack(steps, arrays), "values": pack(values, arrays)}
    return record


def _name(value: Any) -> str:
    if isinstance(value, str):
        return value
    return getattr(value, "__name__", "") or type(value).__name__


def _targets(name: str, classes: int, rng: np.random.Generator) -> np.ndarray:
    name = name.lower().replace("_", "")
    if "sparse" in name:
        return rng.integers(0, classes, BATCH).astype(np.int32)
    if classes > 1 and any(k in name for k in ("categorical", "topk", "kldivergence", "kld")):
        return np.eye(classes, dtype=np.float32)[rng.integers(0, classes, BATCH)]
    if any(k in name for k in ("binary", "accuracy", "auc", "precision", "recall", "hinge", "iou", "positive",
                               "negative", "crossentropy")):
        return rng.integers(0, 2, (BATCH, classes)).astype(np.float32)
    return rng.standard_normal((BATCH, classes)).astype(np.float32)


def _predictions(classes: int, rng: np.random.Generator) -> np.ndarray:
    logits = 2.0 * rng.standard_normal((BATCH, classes))
    if classes == 1:
        return (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def _output_classes(model: Any) -> int | None:
    """The model's last output dimension, when it has one symbolic output of rank 2."""
    try:
        outputs = model.outputs
    except Exception:  # noqa: BLE001 - a subclassed model has no symbolic outputs
        return None
    if not outputs or len(outputs) != 1 or len(outputs[0].shape) != 2 or outputs[0].shape[-1] is None:
        return None
    return int(outputs[0].shape[-1])


def _loss_record(model: Any, classes: int, arrays: list[np.ndarray]) -> dict | None:
    import keras

    loss = model.loss
    if loss is None or isinstance(loss, (dict, list, tuple)):
        return None
    if isinstance(loss, str) or not isinstance(loss, keras.losses.Loss):
        loss = _function_wrapper()(keras.losses.get(loss) if isinstance(loss, str) else loss)
    rng = np.random.default_rng(SEED + 1)
    y_true, y_pred = _targets(_name(model.loss), classes, rng), _predictions(classes, rng)
    value = np.asarray(loss(y_true, y_pred))
    return {"name": _name(model.loss), "y_true": pack(y_true, arrays), "y_pred": pack(y_pred, arrays),
            "value": pack(value.astype(np.float32), arrays)}


def _function_wrapper() -> Any:
    """Keras's wrapper of a loss function (``"mse"``, a callable) as ``compile`` makes it,
    with its default reduction: public in Keras 2 and early Keras 3, only in
    ``keras.src`` since."""
    import keras

    found = getattr(keras.losses, "LossFunctionWrapper", None)
    if found is None:
        from keras.src.losses.losses import LossFunctionWrapper as found
    return found


def _metric_records(model: Any, classes: int, arrays: list[np.ndarray]) -> list[dict] | None:
    compiled = getattr(model, "_compile_metrics", None)
    metrics = getattr(compiled, "_user_metrics", None)
    if metrics is None or isinstance(metrics, dict):
        return None
    out = []
    for index, metric in enumerate(metrics):
        if not hasattr(metric, "update_state") or not hasattr(metric, "get_config"):
            continue  # a string or a function: Keras resolves it from the data
        fresh = type(metric).from_config(metric.get_config())
        rng = np.random.default_rng(SEED + 2 + index)
        batches = []
        for _ in range(2):
            y_true, y_pred = _targets(_name(metric), classes, rng), _predictions(classes, rng)
            fresh.update_state(y_true, y_pred)
            batches.append({"y_true": pack(y_true, arrays), "y_pred": pack(y_pred, arrays),
                            "result": pack(np.asarray(fresh.result()).astype(np.float32), arrays)})
        out.append({"index": index, "of": len(metrics), "name": getattr(metric, "name", _name(metric)),
                    "batches": batches})
    return out


def _model_record(model: Any, arrays: list[np.ndarray]) -> dict:
    record: dict = {"optimizer": _optimizer_record(model.optimizer, arrays)}
    classes = _output_classes(model)
    if classes is None:
        record["note"] = "loss and metrics not replayed: the model has no single rank-2 symbolic output"
        return record
    if _keras_root(model) == "keras":
        record["loss"] = _loss_record(model, classes, arrays)
        record["metrics"] = _metric_records(model, classes, arrays)
    return record


def record_config_call(recorder: Any, module: str, name: str, args: tuple, kwargs: dict, result: Any,
                       before: dict[int, int], variant: str = "") -> bool:
    """After a package function returned: a case when it returned optimizers or compiled a
    model; whether it wrote one. ``variant``: the change, when this is a call with one
    argument changed (``Recorder.record_config_variants``)."""
    target = f"{module}:{name}"
    if recorder.per_target.get(target, 0) >= recorder.max_per_target and not variant:
        return False
    called = [list(args), dict(kwargs)]
    found: list[tuple[list, str, Any]] = []
    for path, leaf in leaves(called):
        if _is_model(leaf) and id(getattr(leaf, "optimizer", None)) != before.get(id(leaf)) \
                and is_keras_optimizer(getattr(leaf, "optimizer", None)):
            found.append((["call", *path], "model", leaf))
    for path, leaf in leaves(result):
        if is_keras_optimizer(leaf):
            found.append((["result", *path], "optimizer", leaf))
        elif _is_model(leaf) and getattr(leaf, "compiled", False) \
                and is_keras_optimizer(getattr(leaf, "optimizer", None)) and not any(leaf is f[2] for f in found):
            found.append((["result", *path], "model", leaf))
    if not found:
        return False
    origin = {"kind": "function", "module": module, "name": name}
    models = {id(leaf) for _, kind, leaf in found if kind == "model"}
    try:
        inputs = pack(_mark_models(called, models), arrays := [], argument_array)
    except Unpackable as exc:
        if not variant:
            recorder.skip(origin, f"training configuration not replayed: {exc}")
        return False
    signature = json.dumps(["config", target, inputs, [hashlib.sha256(a.tobytes()).hexdigest() for a in arrays]],
                           sort_keys=True, default=str)
    if signature in recorder.seen:
        return False
    recorder.seen.add(signature)
    configs = []
    recorder.replaying = True
    try:
        for path, kind, leaf in found:
            try:
                if kind == "optimizer":
                    configs.append({"at": path, "kind": kind, "optimizer": _optimizer_record(leaf, arrays)})
                else:
                    configs.append({"at": path, "kind": kind, **_model_record(leaf, arrays)})
            except Exception as exc:  # noqa: BLE001 - a configuration Keras cannot copy is not replayed
                if not variant:  # a variant is extra: left out without a word
                    recorder.skip(origin, f"training configuration not replayed: {type(exc).__name__}: {exc}"[:300])
    finally:
        recorder.replaying = False
    if not configs:
        return False
    ident = hashlib.sha256(signature.encode()).hexdigest()[:16]
    meta = {"id": ident, "kind": "config", "target": target, "origin": origin, "inputs": inputs, "layer": name,
            "configs": configs, **({"variant": variant} if variant else {})}
    write_case(recorder.out, ident, meta, arrays)
    recorder.per_target[target] = recorder.per_target.get(target, 0) + 1
    recorder.cases.append({"id": ident, "target": target})
    return True


def _mark_models(value: Any, models: set[int]) -> Any:
    if id(value) in models:
        return MODEL
    if isinstance(value, list):
        return [_mark_models(v, models) for v in value]
    if isinstance(value, tuple):
        return tuple(_mark_models(v, models) for v in value)
    if isinstance(value, dict):
        return {k: _mark_models(v, models) for k, v in value.items()}
    return value

