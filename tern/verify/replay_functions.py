"""Replay a recorded call of a package function (``record_functions.py``) on its translation.

The translated function is called eagerly on the recorded arguments (arrays as JAX
arrays) and every array it returns is compared with TF's, in order: structure first (as
many arrays), then values as for layers (``tolerance.compare``). No gradients: a plain
function has no weights, and a wrong derivative shows in the values of the layers and
training steps that use it.

A function that draws (``tf.random``) takes a ``key`` in its translation
(rules/structure/drawing_functions.py). Where TF's two runs agreed, it is called with two
keys that must agree before its result is compared; where they differed, it is replayed
with TF's draws injected, or, for draws tern cannot inject, called as many times as TF was
and its results that differed compared as distributions (``distributions.py``).

TF computed in the recorded arguments' precision; with x64 off, JAX computes float64
arguments in float32. A value that fails in float32 is judged again from a call under
``jax.enable_x64`` (same arguments, float64 kept): a wrong translation fails both.
"""

from __future__ import annotations

import traceback
from typing import Any

import numpy as np

from tern.status import Status
from tern.verify.arrays import array_paths, origin_target, replaced, unpack
from tern.verify.distributions import ALPHA, SEED, distribution_check
from tern.verify.draws import DrawsDoNotLineUp, Injector, forget_traces
from tern.verify.interface import default_checks
from tern.verify.probes import probe_checks
from tern.verify.tolerance import compare
from tern.verify.variants import accepts


def call_function(meta: dict, arrays: Any, key: int | None = None) -> list:
    import jax
    import jax.numpy as jnp

    args, kwargs = unpack(meta["inputs"], arrays, jnp.asarray)
    if key is not None:
        kwargs = {**kwargs, "key": jax.random.key(key)}
    return jax.tree_util.tree_leaves(origin_target(meta["origin"])(*args, **kwargs))


def needs_key(meta: dict, arrays: Any) -> bool:
    """The translation draws through a ``key`` the TF call had no counterpart of
    (rules/structure/drawing_functions.py: keyword-only, no default)."""
    import inspect

    try:
        parameter = inspect.signature(origin_target(meta["origin"])).parameters.get("key")
    except (TypeError, ValueError):
        return False
    _, kwargs = unpack(meta["inputs"], arrays)
    return (parameter is not None and parameter.kind is parameter.KEYWORD_ONLY and parameter.default is parameter.empty
            and "key" not in kwargs)


def _probe(meta: dict, arrays: Any, key: int | None, tolerance: dict | None) -> list[dict]:
    """The function's probes beyond the test's arguments (``probes.py``): each probe's moved
    float arguments in place of the recorded ones."""
    import jax

    def run(floats: list) -> list:
        moved = replaced(arrays, probe["float_at"], [np.asarray(array) for array in floats])
        return [np.asarray(leaf) for leaf in call_function(meta, moved, key)]

    def run64(floats: list) -> list:
        with jax.enable_x64(True):
            return run([np.asarray(f, np.float64) for f in floats])

    checks = []
    for probe in meta["probes"]:
        checks.extend(probe_checks([probe], arrays, run, run64, tolerance))
    return checks


def _variants(meta: dict, arrays: Any, key: int | None, tolerance: dict | None, wide_inputs: bool) -> list[dict]:
    """The function's calls with one plain argument changed (``variants.py``),
    every result compared as the recorded call's are (``@ max_iters=1``)."""
    import jax

    function = origin_target(meta["origin"])
    checks = []
    for variant in meta["variants"]:
        name = variant["name"]
        if not accepts(function, variant["param"]):
            checks.append({"name": f"outputs @ {name}", "ok": True,
                           "not_judged": f"the translation has no parameter {variant['param']!r}"})
            continue
        if key is not None:  # TF's draws agreed on the tests' arguments; here nothing says they would
            checks.append({"name": f"outputs @ {name}", "ok": True,
                           "not_judged": "a drawing function: only the tests' own arguments are compared"})
            continue
        changed = {**meta, "inputs": variant["inputs"]}
        want = array_paths(variant["outputs"])
        try:
            got = call_function(changed, arrays, key)
        except Exception as exc:  # noqa: BLE001 - TF returned here: the user's call would fail
            checks.append({"name": f"outputs @ {name}", "ok": False,
                           "problem": f"the translation raised {type(exc).__name__} where tensorflow returned: "
                                      f"{str(exc).splitlines()[0][:200] if str(exc) else ''}"})
            continue
        if len(got) != len(want):
            checks.append({"name": f"outputs @ {name}", "ok": False,
                           "problem": f"{len(got)} outputs, tensorflow gave {len(want)}"})
            continue
        found = [compare(f"{path} @ {name}", np.asarray(value), arrays[f"a{index}"], tolerance)
                 for (path, index), value in zip(want, got)]
        if wide_inputs and not all(c["ok"] for c in found) and all("max_abs" in c for c in found):
            with jax.enable_x64(True):
                wide = call_function(changed, arrays, key)
            found = [check if check["ok"] else {**compare(check["name"], np.asarray(value), arrays[f"a{index}"], tolerance),
                                                "note": "float64 arguments: compared from a call with x64 on"}
                     for check, (_, index), value in zip(found, want, wide)]
        checks.extend(found)
    return checks


def replay_function_case(meta: dict, arrays: Any, tolerance: dict | None) -> dict:
    if not meta.get("draws"):
        return _replay_function(meta, arrays, tolerance)
    import jax

    injector = Injector(meta["draws"], arrays)
    forget_traces()  # nothing traced before is reused, and no later call keeps the draws
    try:
        with jax.disable_jit(), injector.injected():
            got = call_function(meta, arrays, 0 if needs_key(meta, arrays) else None)
    except DrawsDoNotLineUp as exc:
        return {"id": meta["id"], "target": meta["target"], "layer": meta["layer"], "status": Status.NOT_COMPARED,
                "outputs": [], "gradients": [], "note": f"a drawing function whose draws were not injected: {exc}"}
    except Exception:  # noqa: BLE001 - a broken translation is a finding, not a crash
        return {"id": meta["id"], "target": meta["target"], "layer": meta["layer"], "status": Status.ERROR,
                "message": traceback.format_exc(limit=6)[-2000:]}
    finally:
        forget_traces()
    want = array_paths(meta["outputs"])
    if len(got) != len(want):
        return {"id": meta["id"], "target": meta["target"], "layer": meta["layer"], "status": Status.MISMATCH,
                "outputs": [], "gradients": [], "message": f"{len(got)} outputs, tensorflow gave {len(want)}"}
    checks = [compare(path, np.asarray(value), arrays[f"a{index}"], tolerance) for (path, index), value in zip(want, got)]
    return {"id": meta["id"], "target": meta["target"], "layer": meta["layer"], "outputs": checks, "gradients": [],
            "note": f"TF's {len(injector.draws)} random draws injected into the translation",
            "status": Status.MATCH if all(c["ok"] for c in checks) else Status.MISMATCH}


def _replay_sampled(meta: dict, arrays: Any, tolerance: dict | None, result: dict) -> dict:
    """A function whose results differed between TF calls and whose draws could not be
    injected: the translation is called as many times as TF was, with keys ``SEED + run``
    when it takes one, its sampled results compared as distributions (``distributions.py``)
    and the others value by value."""
    keyed = needs_key(meta, arrays)
    keras_runs = unpack(meta["samples"]["runs"], arrays)
    runs = [[np.asarray(leaf) for leaf in call_function(meta, arrays, SEED + run if keyed else None)]
            for run in range(len(keras_runs[0]))]
    want = array_paths(meta["outputs"])
    if any(len(got) != len(want) for got in runs):
        return {**result, "status": Status.MISMATCH, "outputs": [], "gradients": [],
                "message": f"{len(runs[0])} outputs, tensorflow gave {len(want)}"}
    sampled = meta["samples"]["leaves"]
    if any(len({run[leaf].shape for run in runs}) > 1 for leaf in sampled):
        return {**result, "status": Status.MISMATCH, "outputs": [], "gradients": [],
                "message": "the translation's sampled results change shape between calls, TF's did not"}
    checks = [compare(path, runs[0][position], arrays[f"a{index}"], tolerance)
              for position, (path, index) in enumerate(want) if position not in sampled]
    checks += [distribution_check(want[leaf][0], np.stack([run[leaf] for run in runs]), keras)
               for leaf, keras in zip(sampled, keras_runs)]
    note = (f"results {', '.join(want[leaf][0] for leaf in sampled)} differ between TF calls (draws tern cannot "
            f"inject): compared as distributions over {len(runs)} calls a side"
            + (" (keys SEED + call)" if keyed else "") + f" (energy-distance and Kolmogorov-Smirnov tests, alpha {ALPHA:g})")
    if meta.get("defaults"):
        result["interface"] = default_checks(origin_target(meta["origin"]), meta["defaults"])
    compared = checks + result.get("interface", [])
    return {**result, "outputs": checks, "gradients": [], "note": note,
            "status": Status.MATCH if all(c["ok"] for c in compared) else Status.MISMATCH}


def _replay_function(meta: dict, arrays: Any, tolerance: dict | None) -> dict:
    import jax

    result = {"id": meta["id"], "target": meta["target"], "layer": meta["layer"]}
    try:
        key = None
        if meta.get("samples"):
            return _replay_sampled(meta, arrays, tolerance, result)
        if needs_key(meta, arrays):
            # TF drew from its global state and two runs agreed, so the draws did not decide the
            # result: the translation must give it under any key; two keys that disagree say otherwise
            key = 0
            first, second = call_function(meta, arrays, 0), call_function(meta, arrays, 1)
            if len(first) != len(second) or not all(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
                                                     for a, b in zip(first, second)):
                return {**result, "status": Status.MISMATCH, "outputs": [], "gradients": [],
                        "message": "two keys give the translation different results where two TF runs agreed"}
            result["note"] = "a drawing function: TF's two runs agreed, the translation called with key(0) and key(1) alike"
        got = call_function(meta, arrays, key)
        want = array_paths(meta["outputs"])
        if len(got) != len(want):
            return {**result, "status": Status.MISMATCH, "outputs": [], "gradients": [],
                    "message": f"{len(got)} outputs, tensorflow gave {len(want)}"}
        checks = [compare(path, np.asarray(value), arrays[f"a{index}"], tolerance) for (path, index), value in zip(want, got)]
        wide_inputs = any(arrays[f"a{i}"].dtype == np.float64 for i in range(len(arrays)))
        if wide_inputs and not all(c["ok"] for c in checks) and all("max_abs" in c for c in checks):
            with jax.enable_x64(True):
                wide = call_function(meta, arrays, key)
                checks = [check if check["ok"] else {**compare(path, np.asarray(value), arrays[f"a{index}"], tolerance),
                                                     "note": "float64 arguments: compared from a call with x64 on"}
                          for check, (path, index), value in zip(checks, want, wide)]
        if meta.get("probes"):
            result["probes"] = _probe(meta, arrays, key, tolerance)
        if meta.get("variants"):
            result["variants"] = _variants(meta, arrays, key, tolerance, wide_inputs)
        if meta.get("defaults"):
            result["interface"] = default_checks(origin_target(meta["origin"]), meta["defaults"])
        compared = checks + result.get("probes", []) + result.get("variants", []) + result.get("interface", [])
        return {**result, "outputs": checks, "gradients": [], "status": Status.MATCH if all(c["ok"] for c in compared) else Status.MISMATCH}
    except Exception:  # noqa: BLE001 - a broken translation is a finding, not a crash
        return {**result, "status": Status.ERROR, "message": traceback.format_exc(limit=6)[-2000:]}
