"""JAX worker task: the translation's initial weights of recorded layers, compared with
Keras's (``inits.py``).

Per case (a layer call, or a training step's model: ``inits.as_built``), the translated
module is built the way the original was (``layer_call.py``) and
its ``init`` run as many times as Keras's side drew on the recorded inputs, every RNG stream folded with the
run's index, vmapped over the runs in one compiled call that returns the ``params``
collection only (so XLA drops the forward pass). The marker units the TF job made
are placed into the translation's variable tree as real weights are (``graft.py``); each
placed leaf's markers say which Keras weight and element every one of its elements is.
"""

from __future__ import annotations

import importlib
import inspect
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tern.sandbox.lowerings import computations_seen
from tern.verify.arrays import unpack
from tern.verify.between_jobs import recorded_case
from tern.verify.by_computation import name_of
from tern.verify.graft import graft, unflatten
from tern.verify.inits import RUNS, as_built, compare_inits, keras_layout, leaves_of
from tern.verify.layer_call import layer_call
from tern.verify.replay import call_kwargs, without_jax_notice
from tern.verify.search import QUICK_COMPILE

#: the recorded inputs' values times the runs above which the inits run one by one (the
#: vmapped call holds every run's activations at once)
BATCHED_VALUES = 1 << 22


def init_compare(payload: dict, scratch: Path) -> dict:
    """Task: per case of ``payload["cases"]`` (``{"dir": recording, "id", "inits": the TF
    job's directory}``), ``{"checks", "notes"}`` or ``{"error"}``."""
    try:
        importlib.import_module(payload["module"])
    except BaseException:  # noqa: BLE001 - the replay reports the import failure
        return {"import_error": traceback.format_exc(limit=-2)[-1000:], "cases": {}}
    results = {}
    for case in payload["cases"]:
        try:
            results[case["id"]] = _compared(case)
        except Exception:  # noqa: BLE001 - this case's inits are not compared; the reason comes back
            results[case["id"]] = {"error": without_jax_notice(traceback.format_exc(limit=2)).strip().splitlines()[-1][:300]}
    return {"import_error": "", "cases": results}


def _compared(case: dict) -> dict:
    """The case's checks and notes, or, when what its translation computes is named
    (``_named``) and ``case["known"]`` holds that name, only the name: an earlier job's
    result for it stands (``init_run.py``)."""
    # both directories are named by their content's hash: read once per worker
    meta, arrays = recorded_case(Path(case["dir"]), case["id"])
    made, made_arrays = recorded_case(Path(case["inits"]), case["id"])
    built = as_built(meta)
    if len(built) != len(made["parts"]):
        return {"error": f"{len(built)} models, Keras's side drew {len(made['parts'])}"}
    prepared = [_prepared(model, arrays, part, made_arrays) for model, part in zip(built, made["parts"])]
    names = [p.name for p in prepared]
    name = name_of(names) if all(names) else None
    if name is not None and name in case.get("known", ()):
        return {"computation": name, "known": True}
    checks, notes = [], []
    for model, part in zip(built, prepared):
        found = part.finish()
        if "error" in found:
            return {"error": f"{model['role']}: {found['error']}" if model.get("role") else found["error"]}
        checks.extend(found["checks"])
        notes.extend(found["notes"])
    return {"checks": checks, "notes": notes, "computation": name}


@dataclass
class _Prepared:
    """One model's inits, traced but not yet run: ``name`` is what they compute, by content
    (``lowerings.computations_seen``), or None; ``finish()`` runs them and compares."""

    name: str | None
    finish: Callable[[], dict]


def _prepared(meta: dict, arrays: Any, made: dict, made_arrays: Any) -> _Prepared:
    """One model's initial weights against Keras's runs of it (``made``); a training step's
    model has zeros for inputs, none singled out as a float input.

    Named when its runs are one vmapped computation: its jaxpr as lowered (the module's
    structure and configuration, the recorded inputs and keys, every initializer) and the
    variable tree's paths, shapes and dtypes, which decide where Keras's weights are
    placed (``graft``). With the same Keras runs, the same name gives the same checks."""
    import jax
    import jax.numpy as jnp

    call = layer_call({"float_inputs": [], **meta}, arrays, _model_kwargs if meta.get("trained") else call_kwargs)
    args, kwargs = call.call_inputs(call.floats, call.rest)

    def init(run: Any) -> Any:
        rngs = {name: jax.random.fold_in(key, run) for name, key in call.rngs.items()}
        return call.module.init(rngs, *args, **kwargs)

    def params(run: Any) -> Any:
        """The trainable weights only: nothing returned depends on the call's activations,
        so XLA drops the forward pass ``init`` makes (the state it moves is not compared)."""
        return {"params": init(run).get("params", {})}

    keras = unpack(made["runs"], made_arrays)
    runs = len(keras[0]) if keras else RUNS  # as many as Keras's side drew
    inputs = sum(int(np.size(leaf)) for leaf in jax.tree_util.tree_leaves([args, kwargs]) if hasattr(leaf, "shape"))
    shapes_of = leaves_of(jax.eval_shape(init, 0))
    name, lowered = None, None
    if inputs * runs <= BATCHED_VALUES:
        with computations_seen() as seen:
            try:
                lowered = jax.jit(jax.vmap(params), compiler_options=QUICK_COMPILE).trace(jnp.arange(runs)).lower()
            except Exception:  # noqa: BLE001 - an init vmap cannot batch: run by run (``_every_run``)
                lowered = None
        digests = [digest for fn, digest, _ in seen if fn == params.__name__]
        if lowered is not None and digests and None not in digests:
            tree = sorted((list(path), list(leaf.shape), str(leaf.dtype)) for path, leaf in shapes_of.items())
            name = name_of(digests, tree, runs)

    def finish() -> dict:
        stacked = None
        if lowered is not None:
            try:
                stacked = {path: np.asarray(leaf) for path, leaf in leaves_of(lowered.compile()(jnp.arange(runs))).items()}
            except Exception:  # noqa: BLE001 - as when it cannot batch
                stacked = None
        if stacked is None:
            stacked = _every_run(params, runs)
        units = [{**u, "tree": unpack(u["tree"], made_arrays)} for u in made["units"]]
        zeros = {path: np.zeros(leaf.shape) for path, leaf in shapes_of.items()}
        placed_tree, problems = graft(unflatten(zeros), units)
        if problems:
            return {"error": "markers: " + "; ".join(problems)}
        placed = [(marker, stacked[path]) for path, marker in leaves_of(placed_tree).items() if path in stacked]
        shapes = [tuple(s) for s in made["shapes"]]
        translation, problem = keras_layout(shapes, placed)
        if problem:
            return {"error": problem}
        checks, notes = compare_inits(made["names"], translation, keras, made.get("trainable"))
        return {"checks": checks, "notes": notes}

    return _Prepared(name, finish)


def _model_kwargs(module: Any, kwargs: dict) -> dict:
    """A trained model's recorded call keywords as the translated train state passes them
    (``KerasTrainState.keras_call_kwargs``): ``training`` dropped where the model, or the
    first layer an ``nn.Sequential`` hands its arguments to, takes no such argument."""
    import flax.linen as nn

    first = module
    while isinstance(first, nn.Sequential) and first.layers:
        first = first.layers[0]
    if "training" in kwargs and callable(first):
        params = inspect.signature(type(first).__call__ if isinstance(first, nn.Module) else first).parameters
        if "training" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            kwargs = {k: v for k, v in kwargs.items() if k != "training"}
    return call_kwargs(module, kwargs)


def _every_run(init: Any, runs: int) -> dict[tuple[str, ...], np.ndarray]:
    """Each variable's values over the runs, ``(runs, *shape)``, where the runs are not one
    vmapped call (``_prepared``: compiled quickly, it runs once on a fixture-sized layer):
    its inputs are large or vmapping fails. One compiled call per run, ``RUNS`` of them at
    most."""
    import jax

    compiled = jax.jit(init, compiler_options=QUICK_COMPILE)
    each = [leaves_of(compiled(run)) for run in range(min(runs, RUNS))]  # the tests take unequal numbers of runs
    return {path: np.stack([np.asarray(r[path]) for r in each]) for path in each[0]}

