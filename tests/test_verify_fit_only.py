"""A model the tests only train through ``fit`` (whose calls Keras traces, so none is
recorded) is called once more after the tests on its first samples, and replayed like a
test's call: a translation whose forward pass or initializer is wrong is a mismatch though
the translated smoke test passes. Through the CLI, on a tree ``tern migrate`` translated."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

MODEL = '''"""A small regressor that the tests only ever train."""

import tensorflow as tf


def make_regressor(num_features=4, hidden_units=8):
    return tf.keras.Sequential([
        tf.keras.Input(shape=(num_features,)),
        tf.keras.layers.Dense(hidden_units, activation="relu"),
        tf.keras.layers.Dense(1),
    ])
'''

TEST = '''"""A smoke test: training runs and the loss is finite."""

import numpy as np
import tensorflow as tf

from fitonly.model import make_regressor


class RegressorTest(tf.test.TestCase):

    def test_one_epoch_gives_a_finite_loss(self):
        tf.keras.utils.set_random_seed(0)
        x = np.random.default_rng(0).standard_normal((32, 4)).astype("float32")
        y = x.sum(axis=1, keepdims=True)
        model = make_regressor()
        model.compile(optimizer="sgd", loss="mse")
        history = model.fit(x, y, epochs=1, batch_size=8, verbose=0)
        self.assertTrue(np.isfinite(history.history["loss"][0]))
'''


def _tern(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tern", *args], cwd=project, capture_output=True, text=True,
                          timeout=900)


def _cases(project: Path, translated: Path) -> tuple[list[dict], dict]:
    out = project / "report.json"
    out.unlink(missing_ok=True)
    run = _tern(project, "verify", str(translated), "--original", "tf/fitonly", "--daemon", "auto", "--no-search",
                "--json", str(out))
    assert out.exists(), run.stdout + run.stderr
    report = json.loads(out.read_text())
    (package,) = report["packages"]
    cases = [c for row in package["rows"] for c in row["cases"] if c["target"] == "fitonly.model:make_regressor"]
    tests = {k: v for row in package["rows"] for k, v in row.get("tests", {}).items()}
    return [c for c in cases if "built with" not in c.get("note", "")], tests


def test_a_model_trained_only_through_fit_is_replayed_and_its_initializers_compared(tmp_path):
    project = tmp_path
    (project / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    original = project / "tf" / "fitonly"
    original.mkdir(parents=True)
    (original / "__init__.py").write_text("")
    (original / "model.py").write_text(MODEL)
    (original / "model_test.py").write_text(TEST)
    migrated = _tern(project, "migrate", "tf/fitonly", "--out", "jax/fitonly")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    model = project / "jax" / "fitonly" / "model.py"
    golden = model.read_text()
    relu, kernel = "jax.nn.relu", "nn.Dense(1, kernel_init=nn.initializers.glorot_uniform())"
    assert golden.count(relu) == 1 and golden.count(kernel) == 1, golden
    try:
        model.write_text(golden.replace(relu, "jax.nn.gelu"))  # another activation: the outputs differ
        (case,), tests = _cases(project, model.parent)
        assert case["status"] == "mismatch" and not next(c for c in case["compared"] if c["name"] == "output")["ok"]
        assert tests and all(outcome == "passed" for outcome in tests.values()), tests  # the smoke test saw nothing

        model.write_text(golden.replace(kernel, "nn.Dense(1)"))  # Flax's LeCun normal for Keras's Glorot uniform
        (case,), tests = _cases(project, model.parent)
        assert case["status"] == "mismatch", case
        failed = [c["name"] for c in case["compared"] if not c["ok"]]
        assert failed == ["init of dense/kernel#2"], failed  # every output, gradient and other weight agrees
        assert tests and all(outcome == "passed" for outcome in tests.values()), tests
    finally:
        _tern(project, "serve", "--stop", "--project", str(project))
