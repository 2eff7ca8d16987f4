"""Sampled outputs compared as distributions, where Keras's draws cannot be injected.

A call that draws from samplers tern cannot hand to the translation (``tf.random.categorical``,
truncated normals, Poisson, integer draws, ``tf.random.Generator``) gives other values on
every run, on both sides. The recorder runs such a call ``runs`` times on the same inputs
and weights and keeps each sampled output of every run; the replay runs the translation
as many times with fresh keys (every RNG stream folded with the run's index) and compares
the two sets of runs, output by output, with two families of tests, each given half of ``ALPHA``:

* an energy-distance test on whole runs (each run's output as one vector, every element
  scaled by its pooled standard deviation), calibrated by permuting which side each run came
  from: runs are independent and, when nothing differs, exchangeable, so the test is exact
  whatever the dependence between the elements of one run, and it pools the evidence of all
  elements (a categorical sampled from logits scaled by 1.5 shows in no single element);
* two-sample Kolmogorov–Smirnov tests, one per element (its marginal distribution) and two
  over whole runs (the mean and the mean square of the output's elements in each run),
  Bonferroni-corrected: they say where a difference is.

A correct translation is therefore reported as a mismatch with probability below ``ALPHA``
per output. Keys and permutations are fixed, so a rerun gives the same verdict. KS on
discrete values (integers, masks) is conservative: it reports fewer differences, never more.
"""

from __future__ import annotations

import numpy as np

ALPHA = 1e-3  # family-wise error rate per compared output
RUNS = 200  # runs per side when they are affordable
MIN_RUNS = 50  # fewer runs than this are too few to say anything: the output is not compared
BUDGET_SECONDS = 3.0  # what the recorder spends on one call's extra runs
MAX_VALUES = 2_000_000  # runs x elements over a call's sampled outputs
SEED = 7_919  # the replay's keys: stream i of run r is fold_in(key(SEED + i), r); the permutations' seed
PERMUTATIONS = 3_999  # the smallest p-value is 1 / 4000, below ALPHA / 2


def affordable_runs(seconds_per_run: float, sizes: list[int]) -> int:
    """How many runs the recorder takes: ``RUNS``, fewer when a run is slow or the outputs
    large, 0 when fewer than ``MIN_RUNS`` would be left."""
    by_time = int(BUDGET_SECONDS / max(seconds_per_run, 1e-6))
    by_size = MAX_VALUES // max(sum(sizes), 1)
    runs = min(RUNS, by_time, by_size)
    return runs if runs >= MIN_RUNS else 0


def distribution_check(name: str, got_runs: np.ndarray, want_runs: np.ndarray, alpha: float = ALPHA) -> dict:
    """One sampled output, ``(runs, *shape)`` per side, compared as a distribution; a check in
    the shape of ``tolerance.compare``'s, with the test's figures under ``distribution``."""
    from scipy.stats import ks_2samp

    got, want = np.asarray(got_runs), np.asarray(want_runs)
    name = f"{name} (distribution)"
    if got.shape[1:] != want.shape[1:]:
        return {"name": name, "ok": False, "problem": f"shape {list(got.shape[1:])} != keras {list(want.shape[1:])}"}
    if (got.dtype.kind in "iub") != (want.dtype.kind in "iub"):
        return {"name": name, "ok": False, "problem": f"dtype {got.dtype} vs keras {want.dtype}"}
    a = got.reshape(len(got), -1).astype(np.float64)
    b = want.reshape(len(want), -1).astype(np.float64)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        same = np.array_equal(np.isfinite(a).all(axis=0), np.isfinite(b).all(axis=0))
        a, b = np.nan_to_num(a, posinf=1e300, neginf=-1e300), np.nan_to_num(b, posinf=1e300, neginf=-1e300)
        if not same:
            return {"name": name, "ok": False, "problem": "non-finite values where keras has none, or the reverse"}
    p_energy = energy_test(a, b)
    statistics = {"mean": (a.mean(axis=1), b.mean(axis=1)), "mean square": ((a * a).mean(axis=1), (b * b).mean(axis=1))}
    p_elements = np.atleast_1d(ks_2samp(a, b, axis=0, method="asymp").pvalue) if a.shape[1] else np.ones(0)
    p_elements = np.where(np.isnan(p_elements), 1.0, p_elements)  # both sides one constant: nothing differs
    p_runs = {key: float(np.nan_to_num(ks_2samp(x, y, method="asymp").pvalue, nan=1.0)) for key, (x, y) in statistics.items()}
    tests = len(p_elements) + len(p_runs)
    worst_element = int(np.argmin(p_elements)) if len(p_elements) else None
    candidates = [(float(p_elements[worst_element]), f"element {[int(i) for i in np.unravel_index(worst_element, got.shape[1:])]}")
                  if worst_element is not None else (1.0, ""), *((p, f"the {key} over each run") for key, p in p_runs.items())]
    p_min, where = min(candidates)
    adjusted = min(1.0, p_min * tests)
    ok = bool(adjusted >= alpha / 2 and p_energy >= alpha / 2)
    summary = {"runs": [len(a), len(b)], "alpha": alpha,
               "energy": {"test": "energy distance, permutations of the runs", "permutations": PERMUTATIONS, "p": p_energy},
               "ks": {"test": "two-sample Kolmogorov-Smirnov, Bonferroni", "tests": tests, "p_adjusted": adjusted,
                      "where": where},
               "mean": [float(a.mean()), float(b.mean())], "std": [float(a.std()), float(b.std())]}
    check = {"name": name, "ok": ok, "distribution": summary}
    if not ok:
        found = []
        if p_energy < alpha / 2:
            found.append(f"energy distance over whole runs p = {p_energy:.2g}")
        if adjusted < alpha / 2:
            found.append(f"KS at {where}, Bonferroni-adjusted p = {adjusted:.2g} over {tests} tests")
        check["problem"] = (f"distributions differ ({'; '.join(found)}; each family at alpha {alpha / 2:g}, {len(a)} runs a "
                            f"side): mean {summary['mean'][0]:.4g} vs keras {summary['mean'][1]:.4g}, std "
                            f"{summary['std'][0]:.4g} vs keras {summary['std'][1]:.4g}")
    return check


def energy_test(a: np.ndarray, b: np.ndarray, permutations: int = PERMUTATIONS) -> float:
    """The permutation p-value of the energy distance between two sets of runs ``(runs,
    elements)``, every element scaled by its pooled standard deviation (a function of the
    pooled runs, so the permutations stay exchangeable); 1.0 when nothing varies."""
    x = np.concatenate([a, b])
    scale = x.std(axis=0)
    varies = scale > 0
    if not varies.any():
        return 1.0
    x = x[:, varies] / scale[varies]
    squares = (x * x).sum(axis=1)
    distances = np.sqrt(np.maximum(squares[:, None] + squares[None, :] - 2 * x @ x.T, 0.0))
    n, m = len(a), len(b)
    rng = np.random.default_rng(SEED)
    labels = np.zeros((permutations + 1, n + m))
    labels[0, :n] = 1.0  # the observed split first
    chosen = np.argsort(rng.random((permutations, n + m)), axis=1)[:, :n]
    np.put_along_axis(labels[1:], chosen, 1.0, axis=1)
    to_first = labels @ distances  # per split and run: the summed distance to the first side's runs
    within_first = (to_first * labels).sum(axis=1)
    cross = to_first.sum(axis=1) - within_first
    within_second = distances.sum() - within_first - 2 * cross
    energy = 2 * cross / (n * m) - within_first / n**2 - within_second / m**2
    return float((1 + np.count_nonzero(energy[1:] >= energy[0] - 1e-12 * abs(energy[0]))) / (permutations + 1))
