"""Replay a recorded call of a package function (``record_functions.py``) on its translation.

The translated function is called eagerly on the recorded arguments (arrays as JAX
arrays) and every array it returns is compared with TF's, in order: structure first (as
many arrays), then values as for layers (``replay.compare``). No gradients: a plain
function has no weights, and a wrong derivative shows in the values of the layers and
training steps that use it.

TF computed in the recorded arguments' precision; with x64 off, JAX computes float64
arguments in float32. A value that fails in float32 is judged again from a call under
``jax.enable_x64`` (same arguments, float64 kept): a wrong translation fails both.
"""

from __future__ import annotations

import importlib
import traceback
from typing import Any

import numpy as np

from tern.verify.arrays import array_paths, unpack


def _function(origin: dict) -> Any:
    target = importlib.import_module(origin["module"])
    for part in origin["name"].split("."):
        target = getattr(target, part)
    return target


def _call(meta: dict, arrays: Any) -> list:
    import jax
    import jax.numpy as jnp

    args, kwargs = unpack(meta["inputs"], arrays, jnp.asarray)
    return jax.tree_util.tree_leaves(_function(meta["origin"])(*args, **kwargs))


def replay_function_case(meta: dict, arrays: Any, tolerance: dict | None) -> dict:
    import jax

    from tern.verify.replay import compare

    result = {"id": meta["id"], "target": meta["target"], "layer": meta["layer"]}
    try:
        got = _call(meta, arrays)
        want = array_paths(meta["outputs"])
        if len(got) != len(want):
            return {**result, "status": "mismatch", "outputs": [], "gradients": [],
                    "message": f"{len(got)} outputs, tensorflow gave {len(want)}"}
        checks = [compare(path, np.asarray(value), arrays[f"a{index}"], tolerance) for (path, index), value in zip(want, got)]
        wide_inputs = any(arrays[f"a{i}"].dtype == np.float64 for i in range(len(arrays.files)))
        if wide_inputs and not all(c["ok"] for c in checks) and all("max_abs" in c for c in checks):
            with jax.enable_x64(True):
                wide = _call(meta, arrays)
                checks = [check if check["ok"] else {**compare(path, np.asarray(value), arrays[f"a{index}"], tolerance),
                                                     "note": "float64 arguments: compared from a call with x64 on"}
                          for check, (path, index), value in zip(checks, want, wide)]
        return {**result, "outputs": checks, "gradients": [], "status": "match" if all(c["ok"] for c in checks) else "mismatch"}
    except Exception:  # noqa: BLE001 - a broken translation is a finding, not a crash
        return {**result, "status": "error", "message": traceback.format_exc(limit=6)[-2000:]}
