"""TF worker task: many runs of recorded calls whose draws the translation did not take.

A call recorded with Keras's draws is replayed with them injected (``draws.py``). When the
translation draws otherwise (another kind, shape or count), its outputs that depend on the
draws cannot be compared value by value; they can as distributions (``distributions.py``).
Keras's runs are made here, only for such cases and only when a replay asks: the layer is
built again from the recording (``reference.rebuilt_layer``, float32), given the recorded
weights, and called on the recorded inputs as many times as is affordable, its RNG state
advancing between runs and every other variable restored. A rebuilt layer whose outputs
that do not depend on the draws differ from the recorded ones is not faithful, and gives
no runs; the reason comes back with the result.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from tern.verify.arrays import array_paths, pack
from tern.verify.distributions import affordable_runs
from tern.verify.reference import per_case, rebuilt_layer
from tern.weights.port import variable_path


def sample_calls(payload: dict, scratch: Path) -> dict:
    """Task: ``payload["cases"]`` (ids in the recording ``payload["dir"]``) run many times,
    each written to ``scratch / OUTPUT`` under its id as ``{"samples": {"leaves", "runs"}}``.
    Returns, per id, "ok" or why there are no runs."""
    return per_case(payload, scratch, _runs)  # a case without runs: its sampled outputs stay uncompared


def _runs(meta: dict, arrays: Any) -> tuple[dict, list[np.ndarray]]:
    import tensorflow as tf

    layer, args, kwargs, _, _, recorded = rebuilt_layer(meta, arrays, as_input=lambda value: value)
    variables = list(layer.weights)
    sampled = list(meta.get("sampled", []))
    recorded_outputs = [arrays[f"a{index}"] for _, index in array_paths(meta["outputs"])]

    def run() -> list[np.ndarray]:
        leaves = [np.asarray(leaf) for leaf in tf.nest.flatten(layer(*args, **kwargs))]
        for variable, value in zip(variables, recorded):
            if "seed_generator" not in variable_path(variable):  # the RNG state advances between runs
                variable.assign(value)
        return leaves

    started = time.perf_counter()
    first = run()
    seconds = time.perf_counter() - started
    if len(first) != len(recorded_outputs) or any(
            i not in sampled and not np.array_equal(got, want, equal_nan=True)
            for i, (got, want) in enumerate(zip(first, recorded_outputs))):
        raise ValueError("rebuilt, the layer's outputs that do not depend on the draws differ from the recorded ones")
    if any(first[i].dtype.kind not in "fiub" for i in sampled):
        raise ValueError("a sampled output is not numeric")
    runs = affordable_runs(seconds, [int(first[i].size) for i in sampled])
    if not runs:
        raise ValueError(f"too slow or too large to sample ({seconds * 1000:.0f} ms a run)")
    kept = [[first[i] for i in sampled]]
    while len(kept) < runs:
        again = run()
        if len(again) != len(first) or any(again[i].shape != first[i].shape for i in sampled):
            raise ValueError("the sampled outputs change shape between runs")
        kept.append([again[i] for i in sampled])
    samples_arrays: list[np.ndarray] = []
    runs_meta = pack([np.stack([one[k] for one in kept]) for k in range(len(sampled))], samples_arrays)
    return {"id": meta["id"], "samples": {"leaves": sampled, "runs": runs_meta}}, samples_arrays
