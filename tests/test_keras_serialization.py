"""Keras serialization round trips of translated objects: a custom learning-rate schedule
through ``keras.optimizers.schedules.serialize/deserialize`` and
``keras.utils.serialize_keras_object/deserialize_keras_object``, as library tests write them
(tensorflow_similarity's schedule tests), migrated and run with TensorFlow unimportable; the
original tests run under TensorFlow first, so both sides pass the same assertions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_support_module import BLOCK_TF

SCHEDULES = '''import tensorflow as tf


@tf.keras.utils.register_keras_serializable(package="Sched")
class WarmupLinear(tf.keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup to a peak, then constant."""

    def __init__(self, peak, warmup_steps, name=None):
        super().__init__()
        if warmup_steps < 1:
            raise ValueError("warmup_steps must be positive")
        self.peak = peak
        self.warmup_steps = warmup_steps
        self.name = name

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        return self.peak * tf.minimum(step / self.warmup_steps, 1.0)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "name": self.name}
'''

TEST = '''import numpy as np
import tensorflow as tf
from absl.testing import parameterized
from tensorflow.keras.optimizers import schedules
from tensorflow.python.framework import combinations

from sched.schedules import WarmupLinear


def _round_trip(schedule, how):
    if how == "schedules":
        return schedules.deserialize(schedules.serialize(schedule))
    if how == "utils":
        return tf.keras.utils.deserialize_keras_object(tf.keras.utils.serialize_keras_object(schedule))
    return schedule


@combinations.generate(combinations.combine(mode=["eager"], how=["none", "schedules", "utils"]))
class WarmupLinearTest(tf.test.TestCase, parameterized.TestCase):
    def test_values_survive_the_round_trip(self, how):
        schedule = _round_trip(WarmupLinear(0.5, 4, name="warm"), how)
        self.assertIsInstance(schedule, WarmupLinear)
        self.assertEqual(schedule.get_config(), {"peak": 0.5, "warmup_steps": 4, "name": "warm"})
        for step, want in [(0, 0.0), (2, 0.25), (4, 0.5), (9, 0.5)]:
            self.assertAllClose(schedule(step), want)
'''


def _run(args: list[str], cwd: Path, prelude: str = "") -> subprocess.CompletedProcess:
    code = prelude + "import sys, pytest; sys.exit(pytest.main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("serialization")
    (root / "sched").mkdir()
    (root / "sched" / "__init__.py").write_text("")
    (root / "sched" / "schedules.py").write_text(SCHEDULES)
    (root / "sched" / "schedules_test.py").write_text(TEST)
    proc = subprocess.run([sys.executable, "-m", "tern", "migrate", "sched", "--out", "out/sched", "-q"], cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


def test_the_original_round_trips_pass_under_keras(migrated):
    proc = _run(["-q", "-p", "no:cacheprovider", "sched/schedules_test.py"], migrated)
    assert proc.returncode == 0 and "3 passed" in proc.stdout, proc.stdout[-3000:]


def test_the_translated_round_trips_pass_without_tensorflow(migrated):
    text = (migrated / "out" / "sched" / "schedules_test.py").read_text()
    assert "TODO(tern)" not in text and "tensorflow" not in text, text
    assert "@parameterized.product(how=" in text and "keras_deserialize_object(keras_serialize_object(" in text, text
    proc = _run(["-q", "-p", "no:cacheprovider", "sched/schedules_test.py"], migrated / "out", BLOCK_TF)
    assert proc.returncode == 0 and "3 passed" in proc.stdout, proc.stdout[-3000:]


def test_a_schedule_without_a_config_is_refused_with_its_reason(migrated):
    code = BLOCK_TF + (
        "import optax\n"
        "from sched._keras_compat import keras_serialize_object\n"
        "try:\n"
        "    keras_serialize_object(optax.cosine_decay_schedule(0.1, 10))\n"
        "except TypeError as exc:\n"
        "    print('refused:', exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=migrated / "out", capture_output=True, text=True, timeout=300)
    assert "refused: cannot serialize function" in proc.stdout, proc.stdout + proc.stderr
