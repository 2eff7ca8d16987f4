"""JAX worker: replay recorded training steps (``step_record.py``) on the translated step.

Per case: build the translated model the way forward replays do (same factory or class
and arguments), graft the Keras weights of the snapshot into its variable tree, build
the optimizer and any Keras loss argument through tern's own tables (``step_objects``),
make ``KerasTrainState.from_variables(model.apply, variables, tx, seed=0)`` with the class
the translated module defines, and call the translated step once per recorded step,
with the state in the model's place, the optimizer dropped and the other arguments as
recorded. The step returns ``(state, original_return)``; a step over several (model,
optimizer) pairs takes a state for each and returns ``(*states, original_return)``. A step
that draws (``tf.random``) runs unjitted with Keras's draws of that step injected.

After every step: the returned value against what the TF step returned, then every
variable of the state (``params`` and the other collections) against the Keras weights
after that step, ported the same way. Structure first, then values with
``|jax - keras| <= atol + rtol * |keras|`` (``DEFAULT_TOLERANCE``, or the configured
``[tool.tern.verify.training]`` one). The first step and the first value that differ are
reported with the Keras variable's name, the Flax path and both values.
"""

from __future__ import annotations

import importlib
import inspect
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from tern.status import Status
from tern.verify.arrays import build as build_model
from tern.verify.arrays import read_case, unpack
from tern.verify.draws import DrawsDoNotLineUp, Injector, forget_traces
from tern.verify.graft import DERIVED, flatten, graft
from tern.verify.passes import ReplayedPasses
from tern.verify.tolerance import compare
from tern.verify.step_objects import translated_value

DEFAULT_TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}  # float32, on values (not on displacements)


def replay_steps(payload: dict, scratch: Path) -> dict:
    """Task: replay each step case of ``payload["cases"]`` (``{"dir", "id", "tolerance"}``)."""
    return {"steps": [replay_step(Path(c["dir"]), c["id"], c.get("tolerance")) for c in payload["cases"]]}


def replay_step(directory: Path, name: str, tolerance: dict | None) -> dict:
    meta, arrays = read_case(directory, name)
    tol = loop_tolerance({**DEFAULT_TOLERANCE, **(tolerance or {})}, meta)
    result = {"id": meta["id"], "target": meta["target"], "steps": meta["steps"], "batches": meta["batches"],
              "optimizer": meta["optimizer"], **tol}
    if meta.get("loop"):
        result["loop"] = True
        result["updates"] = meta.get("updates", 0)
    module_name = meta["target"].partition(":")[0]
    try:
        module = importlib.import_module(module_name)
    except BaseException:  # noqa: BLE001 - the translation's own failure is the finding
        return {**result, "status": Status.ERROR, "message": "import: " + traceback.format_exc(limit=-3)[-1500:]}
    try:
        return {**result, **_replay(module, meta, arrays, tol)}
    except Exception:  # noqa: BLE001 - a broken translation is a finding, not a crash
        return {**result, "status": Status.ERROR, "message": traceback.format_exc(limit=-6)[-2000:]}


def loop_tolerance(tol: dict, meta: dict) -> dict:
    """A loop runs many steps inside one call, and float32 differences between TF's and XLA's
    kernels compound with every update: its tolerance is the per-step one times the number
    of optimizer updates it made (24 Adam steps drift by about 4e-5 relative; 1e-5 x 24)."""
    if not meta.get("loop"):
        return tol
    updates = max(1, int(meta.get("updates", 1)))
    return {**tol, "rtol": tol["rtol"] * updates, "atol": tol["atol"] * updates}


def _mapping(fn: Any, meta: dict) -> dict[str, str] | str:
    """Original parameter -> translated parameter (a state takes each model's place, the
    optimizers are dropped); a reason when the translation does not have that shape."""
    optimizers = {role["optimizer_param"] for role in meta["roles"]}
    models = [role["model_param"] for role in meta["roles"]]
    kept = [p for p in meta["params"] if p not in optimizers]
    try:
        translated = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return f"cannot read the signature of the translated {meta['function']}"
    if len(translated) != len(kept) or optimizers & set(translated):
        return (f"the translated {meta['function']}({', '.join(translated)}) is not a train-state step: expected "
                f"{len(kept)} parameters, the original's ({', '.join(meta['params'])}) without "
                f"{', '.join(repr(o) for o in sorted(optimizers))} and with a state in "
                f"{', '.join(repr(m) for m in models)}'s place")
    return dict(zip(kept, translated))


def _support(module: Any, name: str) -> Any:
    """A support definition as the translated module sees it: its own (older translations
    inlined them), else its package's generated support module's, else tern's own (the module
    copies it verbatim; a package whose files never name it has none)."""
    import importlib

    from tern.engine.support_module import SUPPORT_MODULE

    if hasattr(module, name):
        return getattr(module, name)
    root = module.__name__.split(".")[0]
    for where in (f"{root}.{SUPPORT_MODULE}", SUPPORT_MODULE, "tern_rules.support"):
        try:
            found = getattr(importlib.import_module(where), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    return None


def _replay(module: Any, meta: dict, arrays: Any, tol: dict) -> dict:
    import jax
    import jax.numpy as jnp

    fn = getattr(module, meta["function"], None)
    state_class = _support(module, "KerasTrainState")
    if fn is None:
        return {"status": Status.ERROR, "message": f"the translated module has no {meta['function']}"}
    if state_class is None:
        return {"status": Status.ERROR, "message": "the translated module defines no KerasTrainState: "
                f"{meta['function']} is not in train-state form"}
    mapping = _mapping(fn, meta)
    if isinstance(mapping, str):
        return {"status": Status.ERROR, "message": mapping}
    roles = meta["roles"]
    several = len(roles) > 1
    txs = []
    for role in roles:
        if not role["optimizer"]:  # the loop makes its optimizer and puts it in the state (with_optimizer)
            import optax

            txs.append(optax.identity())
            continue
        tx, reason = translated_value(role["optimizer"])
        label = f"optimizer {role['optimizer_param']!r}" if several else "optimizer"
        if reason:
            return {"status": Status.NOT_COMPARED, "reason": f"{label}: {reason}"}
        txs.append(tx)
    calls = []
    for call in meta["calls"]:
        kwargs = {}
        for name, value in call.items():
            if isinstance(value, dict) and "__passes__" in value:  # a loop's dataset: the original's passes
                kwargs[mapping[name]] = ReplayedPasses(unpack(value["__passes__"], arrays, np.asarray))
                continue
            if isinstance(value, dict) and "__keras_loss__" in value:
                loss, reason = translated_value(value["__keras_loss__"])
                if reason:
                    return {"status": Status.NOT_COMPARED, "reason": f"argument {name!r}: {reason}"}
                kwargs[mapping[name]] = loss
            else:
                kwargs[mapping[name]] = unpack(value, arrays, jnp.asarray)
        calls.append(kwargs)
    states = []
    for role, tx in zip(roles, txs):
        made = _state(module, state_class, role, tx, arrays)
        if isinstance(made, dict):
            return made
        states.append(made)

    checks: list[dict] = []
    draws = meta.get("draws")
    for t, (kwargs, after) in enumerate(zip(calls, meta["after"]), start=1):
        given = {mapping[role["model_param"]]: state for role, (state, *_) in zip(roles, states)}
        try:
            out = _call_step(fn, {**given, **kwargs}, draws[t - 1] if draws else None, arrays)
        except DrawsDoNotLineUp as exc:
            return {"status": Status.NOT_COMPARED, "reason": f"step {t}: Keras's random draws not injected: {exc}"}
        if not (isinstance(out, tuple) and len(out) == len(roles) + 1):
            shape = ", ".join([*(f"{role['model_param']}_state" for role in roles), f"{meta['function']}'s return value"])
            return {"status": Status.ERROR, "message": f"step {t}: the translated {meta['function']} returned "
                    f"{type(out).__name__}{f' of {len(out)}' if isinstance(out, tuple) else ''}, not ({shape})"}
        *new_states, returned = out
        step_checks = _compare_returned(t, returned, unpack(after["result"], arrays), tol)
        for i, (role, (_, init, names, order), state) in enumerate(zip(roles, states, new_states)):
            role_units = after["units"][i]
            want, problems = graft(init, _units(role_units, arrays))
            if problems:
                return {"status": Status.ERROR, "message": f"step {t}: Keras weights: " + "; ".join(problems)}
            got = flatten(jax.tree_util.tree_map(np.asarray, {"params": state.params, **state.model_state}))
            prefix = f"{role['model_param']}: " if several else ""
            for path, value in sorted(flatten(want).items(), key=lambda item: order.get(item[0], len(order))):
                if path[0] in DERIVED:
                    continue  # a pass's loss terms, not weights
                flax = prefix + "/".join(path)
                if path not in got:
                    step_checks.append({"step": t, "name": flax, "keras": names.get(path, "?"), "ok": False,
                                        "problem": "missing from the state after the step"})
                    continue
                check = compare(flax, got[path], value, tol)
                step_checks.append({**check, "step": t, "keras": names.get(path, "?"),
                                    **(_first_bad(got[path], value, tol) if not check["ok"] else {})})
        states = [(state, *rest) for state, (_, *rest) in zip(new_states, states)]
        checks += step_checks
    divergence = _divergence(checks)
    result = {"status": Status.MISMATCH if divergence else Status.EQUIVALENT, "compared": len(calls),
              "loss": _worst([c for c in checks if c.get("kind") == "returned"]),
              "params": _worst([c for c in checks if c.get("kind") != "returned"]),
              "divergence": divergence}
    if draws:
        result["note"] = f"TF's random draws injected into the translation ({sum(len(d) for d in draws)} over {len(draws)} steps)"
    return result


def _call_step(fn: Any, kwargs: dict, draws: list | None, arrays: Any) -> Any:
    """One step; with Keras's draws injected (``draws.py``), unjitted, so every draw is taken
    in the order the translation makes it, and nothing traced with them is kept."""
    if draws is None:
        return fn(**kwargs)
    import jax

    injector = Injector(draws, arrays)
    forget_traces()
    try:
        with jax.disable_jit(), injector.injected():
            return fn(**kwargs)
    finally:
        forget_traces()


def _state(module: Any, state_class: Any, role: dict, tx: Any, arrays: Any) -> tuple | dict:
    """The role's train state from the Keras snapshot: (state, zero variables, Keras names by
    Flax path, Keras order by Flax path), or the result that says why it cannot be made."""
    import jax

    model = build_model(role["origin"], arrays)
    args, kwargs = unpack(role["model_inputs"], arrays, jax.numpy.asarray)
    # Keras passes `training` to every model; a Flax module without the argument is built without it, as it is called
    # (translations from before tern wrote keras_call_kwargs pass the call's arguments as recorded)
    drop_training = getattr(state_class, "keras_call_kwargs", None)
    if drop_training is not None:
        kwargs = drop_training(state_class.from_variables(model.apply, {}, tx), kwargs)
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1), "noise": jax.random.key(2)}
    abstract = jax.eval_shape(lambda: model.init(rngs, *args, **kwargs))
    init = jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), dict(abstract))
    variables, problems = graft(init, _units(role["units"], arrays))
    if problems:
        return {"status": Status.ERROR, "message": "weights: " + "; ".join(problems)}
    names, order = _keras_names(init, role, arrays)
    frozen = _frozen_layers(init, role, arrays)
    if isinstance(frozen, str):
        return {"status": Status.NOT_COMPARED, "reason": frozen}
    if frozen:
        table_class = _support(module, "KerasTrainable")
        if table_class is None:
            return {"status": Status.NOT_COMPARED, "reason": "the test froze layers and the translated module has no "
                    "KerasTrainable to freeze them with"}
        table = table_class.of(model)
        for layer in frozen:
            table.set(layer, False)
        state = state_class.of_module(model, variables, tx)
    else:
        state = state_class.from_variables(model.apply, variables, tx, seed=0)
    return state, init, names, order


def _divergence(checks: list[dict]) -> dict | None:
    """The first step where anything differs, the returned value if it differs there, and
    the first parameter that differs (at that step or later: an optimizer such as Adam can
    absorb a small gradient difference for a step)."""
    bad = [c for c in checks if not c["ok"]]
    if not bad:
        return None
    returned = next((c for c in bad if c.get("kind") == "returned"), None)
    parameter = next((c for c in bad if c.get("kind") != "returned"), None)
    return {"step": bad[0]["step"], "returned": returned if returned and returned["step"] == bad[0]["step"] else None,
            "parameter": parameter}


def _units(units: list[dict], arrays: Any) -> list[dict]:
    return [{**u, "tree": unpack(u["tree"], arrays)} for u in units]


def _frozen_layers(init: dict, meta: dict, arrays: Any) -> list[tuple[str, ...]] | str:
    """The Flax paths of the layers whose Keras variables the test made non-trainable (``layer.trainable =
    False``) before the first step, or why they cannot be frozen the same way in the translation."""
    flags = meta.get("keras_trainable")
    if not flags or all(flags):
        return []
    tree, _ = graft(init, _units(meta["name_units"], arrays))
    by_layer: dict[tuple[str, ...], set[bool]] = {}
    for path, leaf in flatten(tree).items():
        if path[0] != "params":
            continue
        indices = {int(i) for i in np.unique(np.asarray(leaf)) if 0 <= int(i) < len(flags)}
        by_layer.setdefault(path[1:-1], set()).update(flags[i] for i in indices)
    mixed = [layer for layer, seen in by_layer.items() if len(seen) > 1]
    if mixed:
        return f"layer {'/'.join(mixed[0])} has trainable and frozen Keras variables: frozen per layer only"
    return sorted(layer for layer, seen in by_layer.items() if seen == {False})


def _keras_names(init: dict, meta: dict, arrays: Any) -> tuple[dict[tuple[str, ...], str], dict[tuple[str, ...], int]]:
    """Flax path -> the Keras variable(s) it holds, and its place in Keras' weight order
    (parameters are compared, and the first divergent one named, in that order): the
    snapshot ported with each variable filled with its index tells where each one landed."""
    tree, _ = graft(init, _units(meta["name_units"], arrays))
    names = meta["keras_names"]
    found, order = {}, {}
    for path, leaf in flatten(tree).items():
        indices = sorted({int(i) for i in np.unique(np.asarray(leaf)) if 0 <= int(i) < len(names)})
        found[path] = " + ".join(names[i] for i in indices) or "?"
        if indices:
            order[path] = indices[0]
    return found, order


def _compare_returned(step: int, got: Any, want: Any, tol: dict) -> list[dict]:
    import jax

    got_leaves, want_leaves = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves_with_path(want)
    if len(got_leaves) != len(want_leaves):
        return [{"step": step, "kind": "returned", "name": "returned value", "ok": False,
                 "problem": f"{len(got_leaves)} returned values, the TF step returned {len(want_leaves)}"}]
    out = []
    for g, (path, w) in zip(got_leaves, want_leaves):
        label = f"returned value{jax.tree_util.keystr(path)}"  # ``returned value['loss'][5]``
        check = compare(label, g, w, tol)
        out.append({**check, "step": step, "kind": "returned", **(_first_bad(g, w, tol) if not check["ok"] else {})})
    return out


def _first_bad(got: Any, want: Any, tol: dict) -> dict:
    """The first element outside tolerance, with both values."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return {}
    bad = ~(np.abs(got - want) <= tol["atol"] + tol["rtol"] * np.abs(want))
    bad &= ~(np.isnan(got) & np.isnan(want))
    if not bad.any():
        return {}
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return {"index": list(index), "jax_value": float(got[index]), "keras_value": float(want[index])}


def _worst(checks: list[dict]) -> dict:
    measured = [c for c in checks if "max_abs" in c]
    if not measured:
        return {"max_abs": None, "max_rel": None}
    return {"max_abs": max(c["max_abs"] for c in measured), "max_rel": max(c["max_rel"] for c in measured)}
