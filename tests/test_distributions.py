"""The distribution comparison of sampled outputs (tern/verify/distributions.py): calibrated
on draws that agree, and able to tell the differences translations make."""

import json
import subprocess
import sys

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


NOISY = '''import tensorflow as tf


class Noisy(tf.keras.layers.Layer):
    def __init__(self, stddev=0.5, **kwargs):
        super().__init__(**kwargs)
        self.stddev = stddev
        self.dense = tf.keras.layers.Dense(3)

    def call(self, inputs):
        return self.dense(inputs) + self.stddev * tf.random.normal([tf.shape(inputs)[0], 3])
'''

NOISY_TEST = '''import numpy as np
import tensorflow as tf

from noisy.layers import Noisy


class NoisyTest(tf.test.TestCase):
    def test_shape(self):
        self.assertEqual(tuple(Noisy()(np.ones((5, 4), "float32")).shape), (5, 3))
'''

DRAW = 'jax.random.normal(self.make_rng("noise"), [jnp.shape(inputs)[0], 3])'


def test_a_translation_drawing_otherwise_is_compared_against_keras_runs_made_on_request(tmp_path):
    """Keras's normal could be injected, but this translation draws its noise transposed: the
    draws do not line up, so Keras is run many times on request (``sample_calls.py``) and the
    noisy output compared as a distribution: equivalent as written, a mismatch with the noise
    scaled by 1.2 (which the translated test cannot see)."""
    def tern(*args):
        return subprocess.run([sys.executable, "-m", "tern", *args], cwd=tmp_path, capture_output=True, text=True, timeout=1200)

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "noisy").mkdir()
    (tmp_path / "noisy" / "__init__.py").write_text("")
    (tmp_path / "noisy" / "layers.py").write_text(NOISY)
    (tmp_path / "noisy" / "layers_test.py").write_text(NOISY_TEST)
    assert tern("migrate", "noisy", "--out", "out/noisy", "-q").returncode == 0
    translated = tmp_path / "out" / "noisy" / "layers.py"
    text = translated.read_text()
    assert text.count(DRAW) == 1, text
    cases = {}
    for version, scale in (("transposed", ""), ("scaled", " * 1.2")):
        translated.write_text(text.replace(DRAW, f'jax.random.normal(self.make_rng("noise"), [3, jnp.shape(inputs)[0]]).T{scale}'))
        proc = tern("verify", "out/noisy", "--daemon", "never", "--json", f"{version}.json")
        report = json.loads((tmp_path / f"{version}.json").read_text())
        row = next(r for p in report["packages"] for r in p["rows"] if r["module"] == "noisy.layers")
        assert row["tests_passed"] == row["tests_total"] == 1, proc.stdout
        cases[version] = (row["status"], row["cases"][0])
    status, case = cases["transposed"]
    assert status == "equivalent", case
    assert "random draws not injected" in case["note"] and "compared as distributions over 200 runs" in case["note"], case
    status, case = cases["scaled"]
    assert status == "mismatch", case
    assert any(c["name"] == "output (distribution)" and not c["ok"] for c in case["compared"]), case
