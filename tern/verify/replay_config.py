"""Replay a recorded training configuration (``record_config.py``) on its translation.

The translated function is called on the recorded arguments, a model argument replaced by
a stand-in object (the translated ``compile`` keeps its configuration on the model it is
given: ``KerasTrainer.of(model)``). Then, value by value against Keras:
- each optimizer (an optax transformation) steps the recorded variable with the recorded
  gradients; the variable after every step is compared;
- the compiled loss on the recorded targets and predictions;
- each compiled metric, reset, over the recorded batches: its result after each.
A function that fails on the stand-in (it uses its model beyond ``compile``) is not
compared, and says so.
"""

from __future__ import annotations

import traceback
from typing import Any

import numpy as np

from tern.status import Status
from tern.verify.arrays import origin_target, unpack
from tern.verify.record_config import MODEL, leaves
from tern.verify.tolerance import compare, tolerance_for


class ModelArgument:
    """What the translated function gets where the test passed a model."""

    def __repr__(self) -> str:
        return "<the test's model (a stand-in: tern verify)>"


def _substitute(value: Any) -> Any:
    if isinstance(value, str) and value == MODEL:
        return ModelArgument()
    if isinstance(value, list):
        return [_substitute(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_substitute(v) for v in value)
    if isinstance(value, dict):
        return {k: _substitute(v) for k, v in value.items()}
    return value


def _at(tree: Any, path: list) -> Any:
    for found, leaf in leaves(tree):
        if list(found) == list(path):
            return leaf
    raise LookupError(f"nothing at {path}")


def _optimizer_checks(label: str, tx: Any, record: dict, arrays: Any, tolerance: dict | None) -> list[dict]:
    import jax.numpy as jnp
    import optax

    if not (hasattr(tx, "init") and hasattr(tx, "update")):
        return [{"name": label, "ok": False, "problem": f"not an optax transformation: {type(tx).__name__}"}]
    checks = _schedule_checks(label, tx, record["schedule"], arrays, tolerance) if record.get("schedule") else []
    for trajectory in record["trajectories"]:
        params = jnp.asarray(unpack(trajectory["start"], arrays))
        state = tx.init(params)
        for step, (grad, want) in enumerate(zip(trajectory["grads"], trajectory["params"]), 1):
            updates, state = tx.update(jnp.asarray(unpack(grad, arrays)), state, params)
            params = optax.apply_updates(params, updates)
            checks.append(compare(f"{label} step {step} @ gradients x {trajectory['scale']:g}", np.asarray(params),
                                  unpack(want, arrays), tolerance))
    return checks


def _schedule_checks(label: str, tx: Any, schedule: dict, arrays: Any, tolerance: dict | None) -> list[dict]:
    """Keras's schedule against the one the translated optimizer carries (``KerasOptimizer``),
    step by step: the first step that differs is named."""
    import jax.numpy as jnp

    name = f"{label} learning rate ({schedule['name']})"
    rate = getattr(tx, "learning_rate", None)
    if not callable(rate):
        return [{"name": name, "ok": False,
                 "problem": "the translated optimizer carries no schedule (a constant learning rate, or none)"}]
    steps, want = unpack(schedule["steps"], arrays), unpack(schedule["values"], arrays)
    got = np.asarray([np.asarray(rate(jnp.asarray(step)), np.float32) for step in steps])
    check = compare(name, got, want, tolerance)
    if not check["ok"] and got.shape == want.shape:
        tol = tolerance_for(want.dtype, tolerance)
        bad = int(np.argmax(np.abs(got.astype(np.float64) - want) > tol["atol"] + tol["rtol"] * np.abs(want)))
        check["problem"] = f"first differs at step {int(steps[bad])}: {got[bad]:.6g} vs keras {want[bad]:.6g}"
    return [check]


def _trainer(model: Any, label: str) -> Any:
    trainer = getattr(model, "__dict__", {}).get("_keras_trainer")
    if trainer is None or not getattr(trainer, "compiled", False):
        raise LookupError(f"{label}: the translation did not compile the model")
    return trainer


def _model_checks(label: str, model: Any, record: dict, arrays: Any, tolerance: dict | None) -> list[dict]:
    import jax.numpy as jnp

    try:
        trainer = _trainer(model, label)
    except LookupError as exc:
        return [{"name": label, "ok": False, "problem": str(exc)}]
    checks = _optimizer_checks(f"{label} optimizer", trainer._tx, record["optimizer"], arrays, tolerance)
    loss = record.get("loss")
    if loss:
        if trainer._loss is None:
            checks.append({"name": f"{label} loss", "ok": False, "problem": "no loss compiled, Keras has one"})
        else:
            value = trainer._loss(jnp.asarray(unpack(loss["y_true"], arrays)), jnp.asarray(unpack(loss["y_pred"], arrays)),
                                  None)
            checks.append(compare(f"{label} loss {loss['name']}", np.asarray(value, np.float32),
                                  unpack(loss["value"], arrays), tolerance))
    for metric in record.get("metrics") or []:
        if len(trainer._metrics) != metric["of"]:
            checks.append({"name": f"{label} metrics", "ok": False,
                           "problem": f"{len(trainer._metrics)} metrics compiled, Keras has {metric['of']}"})
            break
        translated = trainer._metrics[metric["index"]]
        if hasattr(translated, "reset_state"):
            translated.reset_state()
        for n, batch in enumerate(metric["batches"], 1):
            translated.update_state(jnp.asarray(unpack(batch["y_true"], arrays)), jnp.asarray(unpack(batch["y_pred"], arrays)))
            checks.append(compare(f"{label} metric {metric['name']} after batch {n}",
                                  np.asarray(translated.result(), np.float32), unpack(batch["result"], arrays), tolerance))
        if hasattr(translated, "reset_state"):
            translated.reset_state()
    return checks


def _label(where: str, path: list) -> str:
    """``returned[1]``, ``argument 0``, ``argument model``: where the configured object was."""
    if where == "result":
        return "returned" + "".join(f"[{p}]" for p in path)
    return f"argument {path[1]}" + "".join(f"[{p}]" for p in path[2:])


def replay_config_case(meta: dict, arrays: Any, tolerance: dict | None) -> dict:
    result = {"id": meta["id"], "target": meta["target"], "layer": meta["layer"], "gradients": []}
    args, kwargs = _substitute(unpack(meta["inputs"], arrays))
    try:
        returned = origin_target(meta["origin"])(*args, **kwargs)
    except Exception:  # noqa: BLE001 - a stand-in for the test's model may not be enough
        if any(isinstance(leaf, ModelArgument) for _, leaf in leaves([args, kwargs])):
            return {**result, "status": Status.NOT_COMPARED, "outputs": [],
                    "note": "the translated function fails on a stand-in for its model argument: "
                            + traceback.format_exc(limit=2).splitlines()[-1]}
        return {**result, "status": Status.ERROR, "message": traceback.format_exc(limit=6)[-2000:]}
    checks = []
    try:
        for config in meta["configs"]:
            where, *path = config["at"]
            label = _label(where, path)
            try:
                leaf = _at(returned if where == "result" else [args, kwargs], path)
            except LookupError as exc:
                checks.append({"name": label, "ok": False, "problem": f"{exc} in the translation's result"})
                continue
            if config["kind"] == "optimizer":
                checks += _optimizer_checks(label, leaf, config["optimizer"], arrays, tolerance)
            else:
                checks += _model_checks(label, leaf, config, arrays, tolerance)
    except Exception:  # noqa: BLE001 - a broken translation is a finding, not a crash
        return {**result, "status": Status.ERROR, "message": traceback.format_exc(limit=6)[-2000:]}
    return {**result, "outputs": checks, "note": "training configuration: optimizer steps, compiled loss and metrics",
            "status": Status.MATCH if checks and all(c["ok"] for c in checks) else Status.MISMATCH}
