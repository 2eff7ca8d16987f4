"""The distribution comparison of sampled outputs (tern/verify/distributions.py): calibrated
on draws that agree, and able to tell the differences translations make."""

import numpy as np
import pytest

from tern.verify.distributions import ALPHA, MIN_RUNS, RUNS, affordable_runs, distribution_check, energy_test


def _categorical(logits: np.ndarray, runs: int, rng: np.random.Generator, samples: int = 16) -> np.ndarray:
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    u = rng.random((runs, len(logits), samples, 1))
    return (u > np.cumsum(p, -1)[None, :, None, :]).sum(-1)


def _truncated(rng: np.random.Generator, bound: float) -> np.ndarray:
    """A standard normal re-drawn beyond ``bound`` (``tf.random.truncated_normal`` at 2)."""
    x = rng.normal(size=(RUNS, 8, 8))
    while (outside := np.abs(x) > bound).any():
        x[outside] = rng.normal(size=outside.sum())
    return x


def test_draws_of_one_distribution_agree():
    """Forty pairs of runs from one distribution, continuous and discrete: at ALPHA = 1e-3 per
    output, one false difference here would be a 4% event; with fixed seeds, none is."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(8, 6))
    for _ in range(20):
        check = distribution_check("x", rng.normal(size=(RUNS, 4, 5)), rng.normal(size=(RUNS, 4, 5)))
        assert check["ok"], check
        check = distribution_check("a", _categorical(logits, RUNS, rng), _categorical(logits, RUNS, rng))
        assert check["ok"], check
    assert check["distribution"]["alpha"] == ALPHA


@pytest.mark.parametrize("name, got, want", [
    ("noise scaled by 1.2", lambda r: 1.2 * r.normal(size=(RUNS, 4, 5)), lambda r: r.normal(size=(RUNS, 4, 5))),
    ("noise shifted by 0.3", lambda r: 0.3 + r.normal(size=(RUNS, 4, 5)), lambda r: r.normal(size=(RUNS, 4, 5))),
    ("one element scaled by 2", lambda r: r.normal(size=(RUNS, 6)) * np.array([2, 1, 1, 1, 1, 1]),
     lambda r: r.normal(size=(RUNS, 6))),
    ("a normal truncated at 3 deviations for one truncated at 2", lambda r: _truncated(r, 3.0), lambda r: _truncated(r, 2.0)),
    ("a categorical from logits scaled by 1.5",
     lambda r: _categorical(1.5 * np.random.default_rng(9).normal(size=(8, 6)), RUNS, r),
     lambda r: _categorical(np.random.default_rng(9).normal(size=(8, 6)), RUNS, r)),
    ("Poisson counts from rates shifted by 0.3", lambda r: r.poisson(1.5, size=(RUNS, 5, 3)),
     lambda r: r.poisson(1.2, size=(RUNS, 5, 3))),
])
def test_differences_translations_make_are_found(name, got, want):
    rng = np.random.default_rng(1)
    check = distribution_check("out", got(rng), want(rng))
    assert not check["ok"], (name, check)
    assert check["problem"].startswith("distributions differ"), check


def test_structure_and_constants():
    rng = np.random.default_rng(2)
    assert "shape [3] != keras [4]" in distribution_check("o", rng.normal(size=(RUNS, 3)), rng.normal(size=(RUNS, 4)))["problem"]
    assert "dtype" in distribution_check("o", rng.normal(size=(RUNS, 3)), rng.integers(0, 3, size=(RUNS, 3)))["problem"]
    assert distribution_check("o", np.ones((RUNS, 3)), np.ones((RUNS, 3)))["ok"]
    assert not distribution_check("o", np.ones((RUNS, 3)), np.full((RUNS, 3), 2.0))["ok"]
    assert energy_test(np.zeros((10, 2)), np.zeros((10, 2))) == 1.0


def test_the_recorder_takes_what_it_can_afford():
    assert affordable_runs(0.001, [100]) == RUNS
    assert MIN_RUNS <= affordable_runs(0.03, [100]) < RUNS  # a slow call: fewer runs
    assert affordable_runs(1.0, [100]) == 0  # too slow to say anything
    assert affordable_runs(0.001, [10**6]) == 0  # too large to keep
