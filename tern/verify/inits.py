"""Initial weights compared as distributions: the translation's ``init`` against Keras's
initializers.

The replay ports Keras's weights into the translation, so nothing it compares depends on how
either side initializes them; yet a model trained from scratch starts from them, and Keras
and Flax disagree on most defaults (Dense kernels: Glorot uniform against LeCun normal;
embeddings: uniform(-0.05, 0.05) against a unit normal; LSTM recurrent kernels: one
orthogonal matrix against one per gate). So, per replayed layer or model (the first case
of each that the replay found equal), and per model a training step's replay found equal
(``as_built``):

* a TF job (``init_keras.py``) draws every weight ``RUNS`` times (more for a small layer:
  ``runs_for``) from the initializer the
  layer built afresh made it with (or builds the layer that many times), with the layout of the
  port: the units ``port.py`` makes when each weight's value is its elements' numbers
  (``markers``), which the JAX side places into its tree as it places real weights;
* a JAX job (``init_replay.py``) runs the translation's ``init`` as many times (every RNG
  stream folded with the run's index) and reads each Flax element back to the Keras weight
  and element its marker names. A port that computes instead of moving values (markers
  that are not whole numbers, named twice or never) leaves the layer not compared;
* each weight's two sets of runs are compared as distributions (``init_check``: KS and
  Mann-Whitney tests on each run's mean, mean square, mean fourth power and largest
  magnitude, at ``INIT_ALPHA``).
  A difference is a mismatch of the case, named ``init of <weight>``.

A weight Keras gives the same values on every run is compared too when it is built that
way (an LSTM's bias: zeros, and ones for the forget gate); when its values look drawn, its
initializer was seeded (``GlorotUniform(seed=1)``), the translation cannot draw the same,
and the weight is listed as not compared, as are layers larger than ``MAX_ELEMENTS``.
Keys and seeds are fixed, so a rerun gives the same verdict.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tern.sandbox.memo import Memo
from tern.verify.graft import DERIVED, flatten

#: inits per side: a wrong initializer (another variance, bounds or shape) shifts some
#: per-run statistic of a weight's elements; 50 runs a side show a complete separation at
#: p < 1e-20 and a partial one (a small kernel) well below ``INIT_ALPHA``
RUNS = 50
#: a small layer gets more runs, up to MAX_RUNS, as many as keep its weights' values within
#: SMALL_VALUES a side: a per-run statistic of a weight of a few elements is noisy, and at 50
#: runs Glorot uniform against LeCun normal on a (4, 2) output kernel gave p = 4e-5 only
MAX_RUNS = 400
SMALL_VALUES = 1 << 16
SEED = 104_729  # Keras is seeded with SEED + run; the translation's streams are folded with the run
#: a weight Keras gives the same on every run with at most this many distinct values is
#: deterministic by construction (an LSTM's bias: zeros, ones for the forget gate) and
#: compared; with more, its initializer was seeded, and the translation cannot draw the same
STRUCTURED = 8
MAX_ELEMENTS = 1 << 18  # weights of one layer: RUNS x this many values a side at most
#: per weight: with hundreds of weights in a package, 1e-3 would give a false finding in
#: about one package in three
INIT_ALPHA = 1e-6
#: how Keras's side says a case was not drawn for want of nothing: an earlier one of the same
#: layer and configuration was (compared there), or it has no weights (a function)
COMPARED_THERE = ": compared there"
NOT_A_LAYER = "not a layer: no weights to initialize"
BUDGET_SECONDS = 3.0  # fresh builds of one layer, where its initializers cannot be drawn from directly


def markers(shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    """Per weight, its elements numbered from the weight's offset: every element of the
    layer a distinct whole number (exact in float32 below 2**24)."""
    found, offset = [], 0
    for shape in shapes:
        size = int(np.prod(shape, dtype=np.int64))
        found.append(np.arange(offset, offset + size, dtype=np.float32).reshape(shape))
        offset += size
    return found


def keras_layout(shapes: list[tuple[int, ...]], placed: list[tuple[np.ndarray, np.ndarray]]) -> tuple[list[np.ndarray | None], str]:
    """The translation's runs in Keras's layout: per weight ``(runs, *shape)``, or None for a
    weight no variable holds, from ``placed`` pairs of (the marker leaf as grafted, that
    leaf's runs ``(runs, *leaf shape)``); and why nothing could be read (markers that are
    not whole numbers, or name an element twice), else ""."""
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    total = sum(sizes)
    runs = placed[0][1].shape[0] if placed else 0
    flat = np.full((runs, total), np.nan)
    seen = np.zeros(total, np.int64)
    for marker, values in placed:
        numbers = np.asarray(marker, np.float64).reshape(-1)
        if numbers.size and (not np.all(np.isfinite(numbers)) or np.any(numbers != np.round(numbers))
                             or numbers.min() < 0 or numbers.max() >= total):
            return [], "the port computes weights instead of moving them (a marker is not an element's number)"
        index = numbers.astype(np.int64)
        np.add.at(seen, index, 1)
        flat[:, index] = np.asarray(values, np.float64).reshape(runs, -1)
    if np.any(seen > 1):
        return [], "a Keras weight is placed twice in the translation (tied weights)"
    found, offset = [], 0
    for shape, size in zip(shapes, sizes):
        part = slice(offset, offset + size)
        found.append(flat[:, part].reshape((runs, *shape)) if np.all(seen[part] == 1) else None)
        offset += size
    return found, ""


def as_built(meta: dict) -> list[dict]:
    """What a recorded case has initial weights of, each to build and call once: a layer
    call, as it is; a training step's session (``step_record.py``), each model it trains,
    made the way the test made it and called on zeros of its first inputs' shapes (models
    only training steps use are trained from these initial weights), named by its step
    parameter (``role``) when there are several (a GAN's generator and critic)."""
    if "roles" not in meta:
        return [meta]
    several = len(meta["roles"]) > 1
    return [{"id": meta["id"], "target": meta["target"], "origin": role["origin"], "inputs": role["model_inputs"],
             "trained": True, "role": role["model_param"] if several else ""} for role in meta["roles"]]


def compare_inits(names: list[str], translation: list[np.ndarray | None], keras: list[np.ndarray],
                  trainable: list[bool] | None = None) -> tuple[list[dict], list[str]]:
    """``(checks, notes)``: per trainable weight a distribution check named ``init of
    <name>``, or a note why it is not compared. State (a batch norm's moving statistics) is
    not compared: ``init`` runs a call, and a call in training mode moves it."""
    checks, notes = [], []
    trainable = trainable if trainable is not None else [True] * len(names)
    state = [name for name, kept in zip(names, trainable) if not kept and "seed_generator" not in name]
    if state:
        notes.append(f"initial state not compared (a call in training mode moves it): {', '.join(state)}")
    for name, got, want, kept in zip(names, translation, keras, trainable):
        want = np.asarray(want, np.float64)
        if "seed_generator" in name or not kept:
            continue  # a Keras RNG state is not a weight: the translation keeps its keys elsewhere
        if got is None:
            notes.append(f"init of {name}: not held whole by any variable of the translation; not compared")
        elif len(want) > 1 and np.all(want == want[:1]) and np.unique(want[0]).size > STRUCTURED:
            notes.append(f"init of {name}: Keras gives the same values on every run (a seeded initializer); not compared")
        else:
            checks.append(init_check(f"init of {name}", got, want))
    return checks, notes


#: per run, each side: statistics of a weight's elements whose distributions over the runs
#: are compared (a bounded uniform and a normal of the same variance differ in the last two)
STATISTICS = {"mean": lambda x: x.mean(axis=1), "mean square": lambda x: (x * x).mean(axis=1),
              "mean fourth power": lambda x: (x**4).mean(axis=1), "largest magnitude": lambda x: np.abs(x).max(axis=1)}


def init_check(name: str, got_runs: np.ndarray, want_runs: np.ndarray, alpha: float = INIT_ALPHA) -> dict:
    """One weight's initial values, ``(runs, *shape)`` per side, compared as distributions:
    two-sample tests on each run's ``STATISTICS`` (Kolmogorov-Smirnov, for any difference,
    and Mann-Whitney, more powerful for a shift: a wrong scale moves a statistic),
    Bonferroni-corrected, at ``alpha``. Runs are independent and exchangeable when nothing
    differs, so the tests are exact whatever the dependence within a run (an orthogonal
    matrix's elements). A wrong initializer shifts some statistic far beyond what 50 runs a
    side leave to chance, so ``alpha`` can be small enough that the hundreds of weights of
    a package give no false finding; on a weight of a few elements the per-run statistics
    are noisy, so a small layer gets more runs (``runs_for``). Per-element tests and the energy test sampled outputs get would cost more and
    say little here: a weight's elements are mostly drawn alike, and 4,000 permutations give
    no p-value below ``alpha``. A check in the shape of ``tolerance.compare``'s."""
    from scipy.stats import ks_2samp, mannwhitneyu

    a = np.asarray(got_runs, np.float64).reshape(len(got_runs), -1)
    b = np.asarray(want_runs, np.float64).reshape(len(want_runs), -1)
    if a.shape[1:] != b.shape[1:]:
        return {"name": name, "ok": False, "problem": f"{a.shape[1]} elements, keras {b.shape[1]}"}
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return {"name": name, "ok": False, "problem": "non-finite initial values"}
    p_stats = {}
    for key, f in STATISTICS.items():
        x, y = f(a), f(b)
        p_stats[f"KS on each run's {key}"] = _p("KS", x, y, lambda: ks_2samp(x, y, method="exact" if len(x) + len(y) <= 100 else "asymp"))
        p_stats[f"Mann-Whitney on each run's {key}"] = _p("MW", x, y, lambda: mannwhitneyu(x, y, alternative="two-sided"))
    where, p_min = min(p_stats.items(), key=lambda kv: kv[1])
    adjusted = min(1.0, p_min * len(p_stats))
    summary = {"runs": [len(a), len(b)], "alpha": alpha,
               "tests": {"test": "two-sample Kolmogorov-Smirnov and Mann-Whitney on per-run statistics, Bonferroni",
                         "count": len(p_stats), "p_adjusted": adjusted, "where": where},
               "mean": [float(a.mean()), float(b.mean())], "std": [float(a.std()), float(b.std())]}
    check = {"name": name, "ok": bool(adjusted >= alpha), "distribution": summary}
    if not check["ok"]:
        check["problem"] = (f"initial values differ in distribution ({where}, Bonferroni-adjusted p = "
                            f"{adjusted:.2g} < {alpha:g}; {len(a)} runs a side): mean {summary['mean'][0]:.4g} vs keras "
                            f"{summary['mean'][1]:.4g}, std {summary['std'][0]:.4g} vs keras {summary['std'][1]:.4g}")
    return check


#: p-values a worker has computed, by test and the exact values tested: after an edit that
#: leaves a layer's initializers alone, its runs are drawn again bit for bit (fixed keys),
#: and the exact KS tests were a third of the initial weights' job
_P_VALUES = Memo(4096)


def _p(test_name: str, x: np.ndarray, y: np.ndarray, test: Any) -> float:
    """A test's p-value on two sets of per-run values; two equal constants differ in nothing,
    two different ones in everything. ``test_name`` names ``test`` (a pure function of
    ``x`` and ``y``), which runs once per name and values in this process."""
    if np.ptp(x) == 0 and np.ptp(y) == 0:
        return 1.0 if x[0] == y[0] else 0.0
    key = (test_name, x.dtype.str, len(x), x.tobytes(), y.dtype.str, y.tobytes())
    return _P_VALUES.get(key, lambda: float(np.nan_to_num(test().pvalue, nan=1.0)))


def runs_for(shapes: list[tuple[int, ...]]) -> int:
    """How many times Keras's side draws a layer whose weights have ``shapes`` (the
    translation's side runs as many as Keras's gave)."""
    elements = max(1, sum(int(np.prod(s, dtype=np.int64)) for s in shapes))
    return int(min(MAX_RUNS, max(RUNS, SMALL_VALUES // elements)))


def too_large(shapes: list[tuple[int, ...]]) -> bool:
    return sum(int(np.prod(s, dtype=np.int64)) for s in shapes) > MAX_ELEMENTS


def leaves_of(tree: Any) -> dict[tuple[str, ...], Any]:
    """A variable tree's leaves by path, the derived collections (``graft.DERIVED``) left out."""
    return {path: leaf for path, leaf in flatten(dict(tree)).items() if path[0] not in DERIVED}
