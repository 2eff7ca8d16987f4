"""TF worker task: Keras's initial weights of recorded layers, many times over (``inits.py``).

Per case, the layer is built again from its recording (same class or factory, same
arguments), Keras seeded with ``SEED``, and called once on the recorded inputs so it
creates its weights; the initializer each variable was made with is noted as it is made,
and drawn from ``runs_for - 1`` times more (an initializer object made again with the run's
seed: one draws the same values on every call). Where an initializer cannot be known
(``tf_keras``) or the layer changed a trainable weight after creating it, the layer is built ``RUNS``
times instead, if that fits ``BUDGET_SECONDS``. The
port's units are made once more with each weight's value replaced by its elements' numbers
(``inits.markers``): the translation's side places them as it places real weights, and so
learns which of its variables' elements is which Keras weight's.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from tern.verify.arrays import build, pack, unpack
from tern.verify.inits import BUDGET_SECONDS, COMPARED_THERE, NOT_A_LAYER, RUNS, SEED, as_built, markers, runs_for, too_large
from tern.verify.port import keras_units
from tern.verify.reference import per_case
from tern.weights.port import variable_path


def init_samples(payload: dict, scratch: Path) -> dict:
    """Task: per id of ``payload["cases"]`` (recorded in ``payload["dir"]``), Keras's runs
    and the marker units, written to ``scratch / OUTPUT``; "ok" or why not, per id."""
    flavour = payload.get("keras", "keras3")
    seen: dict[str, str] = {}  # the layer and its constructor's arguments -> why a later case is not drawn

    def once_per_configuration(meta: dict, arrays: Any) -> tuple[dict, list[np.ndarray]]:
        configuration = json.dumps([meta.get("target"), meta.get("origin")], sort_keys=True, default=str)
        if configuration in seen:
            raise ValueError(seen[configuration])
        same = f"the same layer and configuration as case {meta['id']}"
        try:
            made = _inits(meta, arrays, flavour)
        except Exception as exc:
            seen[configuration] = f"{same}, whose initial weights could not be drawn: {exc}"
            raise
        seen[configuration] = f"{same}{COMPARED_THERE}"
        return made

    return per_case(payload, scratch, once_per_configuration)


def _seed(flavour: str, seed: int) -> None:
    if flavour == "tf_keras":
        import tf_keras

        tf_keras.utils.set_random_seed(seed)
    else:
        import keras

        keras.utils.set_random_seed(seed)


def _fresh(meta: dict, arrays: Any, flavour: str, run: int) -> Any:
    _seed(flavour, SEED + run)
    layer = build(meta["origin"], arrays)
    args, kwargs = unpack(meta["inputs"], arrays)
    layer(*args, **kwargs)  # creates the weights
    return layer


@contextlib.contextmanager
def _initializers(flavour: str) -> Iterator[dict[int, Any]]:
    """Keras 3 only: each variable created in the block, by id, with the initializer it was
    made with (Keras drops it once the variable holds its values)."""
    found: dict[int, Any] = {}
    if flavour == "tf_keras":
        yield found
        return
    from keras.src.backend.common import variables

    original = variables.Variable.__init__

    def noted(self, initializer, *args, **kwargs):
        original(self, initializer, *args, **kwargs)
        found[id(self)] = initializer

    variables.Variable.__init__ = noted
    try:
        yield found
    finally:
        variables.Variable.__init__ = original


def _drawn(initializer: Any, shape: tuple[int, ...], dtype: Any, run: int) -> np.ndarray:
    """One more draw of ``initializer``: a Keras initializer object made again with the run's
    seed (an object draws the same values on every call), a function called as it is."""
    config = initializer.get_config() if hasattr(initializer, "get_config") else {}
    if isinstance(config, dict) and "seed" in config:
        initializer = type(initializer).from_config({**config, "seed": SEED + run})
    return np.asarray(initializer(shape, dtype))


def _holds_its_draw(variable: Any, initializer: Any) -> bool:
    """Whether ``variable`` still holds what ``initializer`` gave it: a Keras initializer
    object draws the same values on every call, so a second call tells. A layer that changes
    a weight after creating it (in ``build``, in its first call), or an initializer that
    draws anew on each call, gives False: its draws would not be the layer's."""
    if not callable(initializer):
        return False
    try:
        again = np.asarray(initializer(tuple(variable.shape), variable.dtype))
    except Exception:  # noqa: BLE001 - an initializer that takes other arguments: build the layer again instead
        return False
    return again.shape == tuple(variable.shape) and np.array_equal(again, np.asarray(variable.numpy()))


def _runs(meta: dict, arrays: Any, flavour: str) -> tuple[Any, list[list[np.ndarray]]]:
    """The first fresh layer and every run's weights: drawn again from the initializers the
    first build used (milliseconds), or, where one is not known (``tf_keras``), from as
    many fresh builds as ``BUDGET_SECONDS`` allows."""
    started = time.perf_counter()
    with _initializers(flavour) as made_with:
        first = _fresh(meta, arrays, flavour, 0)
    seconds = time.perf_counter() - started
    variables = list(first.weights)
    runs = [[np.asarray(v.numpy()) for v in variables]]
    # state (a batch norm's moving statistics, which a call in training mode moves) is not
    # compared (``inits.compare_inits``): its runs repeat the first build's values
    if all(_holds_its_draw(v, made_with.get(id(v))) for v in variables if v.trainable):
        for run in range(1, runs_for([tuple(v.shape) for v in variables if v.trainable])):
            runs.append([_drawn(made_with[id(v)], tuple(v.shape), v.dtype, run) if v.trainable else runs[0][i]
                         for i, v in enumerate(variables)])
        return first, runs
    if seconds * RUNS > BUDGET_SECONDS:
        raise ValueError(f"too slow to build {RUNS} times ({seconds * 1000:.0f} ms a build)")
    for run in range(1, RUNS):
        runs.append([np.asarray(v.numpy()) for v in _fresh(meta, arrays, flavour, run).weights])
    return first, runs


def _inits(meta: dict, arrays: Any, flavour: str) -> tuple[dict, list[np.ndarray]]:
    """Per model the case has (``inits.as_built``), Keras's runs and the marker units."""
    if meta.get("kind") in ("function", "config"):
        raise ValueError(NOT_A_LAYER)
    saved: list[np.ndarray] = []
    return {"parts": [_part(built, arrays, flavour, saved) for built in as_built(meta)]}, saved


def _part(meta: dict, arrays: Any, flavour: str, saved: list[np.ndarray]) -> dict:
    if "weights" not in meta and not meta.get("trained"):
        raise ValueError("the recording keeps no Keras weights for this case")
    first, runs = _runs(meta, arrays, flavour)
    variables = list(first.weights)
    # a trained model's copy was rebuilt and checked against the test's when it was recorded
    if not meta.get("trained") and [tuple(v.shape) for v in variables] != [
            tuple(arrays[f"a{w['array']}"].shape) for w in meta["weights"]]:
        raise ValueError("rebuilt, the layer has other weights than the recorded ones")
    shapes = [tuple(int(d) for d in v.shape) for v in variables]
    if too_large(shapes):
        raise ValueError("too many weights to sample their initial values")
    numbered = dict(zip((id(v) for v in variables), markers(shapes)))
    units = [{**u, "tree": pack(u["tree"], saved)} for u in keras_units(first, lambda v: numbered[id(v)])]
    _seed(flavour, SEED)  # what follows in this worker does not depend on how many runs were made
    stacked = [np.stack([r[i] for r in runs]) for i in range(len(variables))]
    names = _names([variable_path(v) for v in variables], first.name)
    return {"names": [f"{meta['role']}/{n}" for n in names] if meta.get("role") else names,
            "shapes": [list(s) for s in shapes], "trainable": [bool(v.trainable) for v in variables],
            "units": units, "runs": pack(stacked, saved)}


def _names(paths: list[str], layer: str) -> list[str]:
    """``dense_3/kernel`` as ``dense/kernel``: the numbers Keras gives names per process left
    out (a report must read the same on every run), the layer's own name too; a name that
    then repeats gets its place (``dense/kernel#2``)."""
    found, seen = [], {}
    for path in paths:
        parts = path.split("/")
        if len(parts) > 1 and parts[0] == layer:
            parts = parts[1:]
        name = "/".join(re.sub(r"_\d+$", "", part) for part in parts)
        seen[name] = seen.get(name, 0) + 1
        found.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return found
