"""Optimizer records (rules/api/optimizers.toml) against Keras 3, step by step.

Every translating case of ``rules/api/cases/optimizers.toml`` (unless ``numeric = false``) is
run both ways on the same parameters and gradients: ``y = <before>`` is built with Keras
(``prelude`` run first) and applied with ``apply_gradients`` to ``tf.Variable``s; the
translation tern produces for ``prelude`` + ``y = <before>`` is executed (support code and
imports included) and its optax transformation applied with ``update``/``apply_updates``.

Parameters have shapes (3, 4), (5,), (2, 3, 2) and (); the gradients of the (5,) leaf are
scaled by 1, 1e-3, 1e-5, 1e-7 and 0, so epsilons, accumulator starts and clipping all
show. After each of STEPS steps, structure first (same leaves, same shapes), then every
parameter's displacement from the start: ``|jax - keras| <= ATOL + RTOL * |keras|`` on
``param - param_0``. RTOL = 1e-4 is float32's floor for Adam-type bias corrections
(``1 - 0.999 ** t`` keeps about four digits); every semantic difference measured below is
larger than 8e-4 of the displacement.

``test_plain_optax_differs`` documents why records are not the plain optax call: each
plain form named in a record's note is run the same way and must FAIL that comparison.
"""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path

import numpy as np
import pytest

import tensorflow as tf  # noqa: E402  (imported once for the session)

import jax.numpy as jnp
import optax

from translated_objects import keras_object, translated_object

CASES_FILE = Path(__file__).resolve().parents[1] / "rules" / "api" / "cases" / "optimizers.toml"
SHAPES = ((3, 4), (5,), (2, 3, 2), ())
SCALES = np.array([1.0, 1e-3, 1e-5, 1e-7, 0.0], np.float32)  # for the (5,) leaf
STEPS = 5
RTOL = 1e-4  # of the displacement from the initial parameters
ATOL = 1e-6


def _cases() -> list[dict]:
    data = tomllib.loads(CASES_FILE.read_text(encoding="utf-8"))
    return [c for c in data["case"] if not c.get("todo") and c.get("numeric", True)]


CASES = _cases()


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little"))


def initial_params() -> list[np.ndarray]:
    rng = _rng("params")
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def gradients(name: str) -> list[list[np.ndarray]]:
    rng = _rng(name)
    steps = []
    for _ in range(STEPS):
        grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
        grads[1] = grads[1] * SCALES
        steps.append(grads)
    return steps


def keras_trajectory(optimizer, grads) -> list[list[np.ndarray]]:
    variables = [tf.Variable(p) for p in initial_params()]
    out = []
    for step in grads:
        optimizer.apply_gradients(zip([tf.constant(g) for g in step], variables))
        out.append([v.numpy() for v in variables])
    return out


def optax_trajectory(tx, grads) -> list[list[np.ndarray]]:
    params = [jnp.asarray(p) for p in initial_params()]
    state = tx.init(params)
    out = []
    for step in grads:
        updates, state = tx.update([jnp.asarray(g) for g in step], state, params)
        params = optax.apply_updates(params, updates)
        out.append([np.asarray(p) for p in params])
    return out


def compare(keras_steps, jax_steps) -> None:
    start = initial_params()
    assert len(keras_steps) == len(jax_steps)
    for t, (k_params, j_params) in enumerate(zip(keras_steps, jax_steps), start=1):
        assert len(k_params) == len(j_params), f"step {t}: {len(k_params)} vs {len(j_params)} parameters"
        for i, (k, j, p0) in enumerate(zip(k_params, j_params, start)):
            assert k.shape == j.shape, f"step {t}, parameter {i}: shape {k.shape} vs {j.shape}"
            np.testing.assert_allclose(
                j - p0, k - p0, rtol=RTOL, atol=ATOL,
                err_msg=f"step {t}, parameter {i} {SHAPES[i]}: displacement differs",
            )


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_optimizer_matches_keras(case: dict):
    prelude = case.get("prelude", "")
    grads = gradients(case["id"])
    compare(
        keras_trajectory(keras_object(case["before"], prelude), grads),
        optax_trajectory(translated_object(case["before"], prelude), grads),
    )


# The plain optax forms the records' notes reject, with the measured reason. Each must fail
# the comparison above (so the tolerance can tell these semantics apart).
PLAIN = [
    ("adam_eps", "keras.optimizers.Adam(0.1)", "optax.adam(0.1, eps=1e-7)",
     "Keras' epsilon is added to the uncorrected sqrt(v)"),
    ("amsgrad", "keras.optimizers.Adam(0.1, amsgrad=True)", "optax.amsgrad(0.1, eps=1e-7)",
     "optax takes the maximum of the bias-corrected v"),
    ("adamax", "keras.optimizers.Adamax(0.1)", "optax.adamax(0.1, eps=1e-7)",
     "optax adds eps inside the running maximum"),
    ("nadam", "keras.optimizers.Nadam(0.1)", "optax.nadam(0.1, eps=1e-7)",
     "Keras uses Dozat's momentum schedule"),
    ("sgd_schedule", "keras.optimizers.SGD(lr, momentum=0.9)", "optax.sgd(lr, momentum=0.9)",
     "optax applies a schedule after the momentum trace"),
    ("adadelta_weight_decay", "keras.optimizers.Adadelta(1.0, weight_decay=0.1)",
     "optax.adadelta(1.0, rho=0.95, eps=1e-7, weight_decay=0.1)",
     "optax.adadelta's weight decay is L2 on the gradient"),
    ("clip_by_block_rms", "keras.optimizers.SGD(0.1, clipnorm=0.5)",
     "optax.chain(optax.clip_by_block_rms(0.5), optax.sgd(0.1))",
     "optax.clip_by_block_rms clips the RMS, not the norm"),
    ("rmsprop_eps", "keras.optimizers.RMSprop(0.1)", "optax.rmsprop(0.1)", "optax's default eps is 1e-8"),
    ("lion_weight_decay", "keras.optimizers.Lion(0.1)", "optax.lion(0.1)", "optax.lion decays by 1e-3 by default"),
]
SCHEDULE = "lr = keras.optimizers.schedules.PiecewiseConstantDecay([1, 3], [0.1, 0.02, 0.5])"
JAX_SCHEDULE = "optax.join_schedules([optax.constant_schedule(v) for v in [0.1, 0.02, 0.5]], [2, 4])"


@pytest.mark.parametrize("name, keras_code, optax_code, why", PLAIN, ids=[p[0] for p in PLAIN])
def test_plain_optax_differs(name, keras_code, optax_code, why):
    grads = gradients(name)
    keras_steps = keras_trajectory(keras_object(keras_code, SCHEDULE), grads)
    jax_steps = optax_trajectory(eval(optax_code, {"optax": optax, "lr": eval(JAX_SCHEDULE, {"optax": optax})}), grads)  # noqa: S307
    with pytest.raises(AssertionError):
        compare(keras_steps, jax_steps)


# Learning-rate reads: Keras' `optimizer.learning_rate` is the rate of the NEXT update,
# schedule(iterations); the translation reads `tx.learning_rate_at(count)` (support/KerasOptimizer.py).
# A custom LearningRateSchedule subclass is translated too (structure/learning_rate_schedule.py).
CUSTOM_SCHEDULE = '''
import math


class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, peak, warmup_steps, decay_steps, alpha=0.0):
        super().__init__()
        self.peak = peak
        self.warmup_steps = warmup_steps
        self.decay_steps = decay_steps
        self.alpha = alpha

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        warm = self.peak * step / self.warmup_steps
        progress = tf.clip_by_value((step - self.warmup_steps) / self.decay_steps, 0.0, 1.0)
        decayed = self.peak * ((1.0 - self.alpha) * 0.5 * (1.0 + tf.cos(math.pi * progress)) + self.alpha)
        return tf.where(step < self.warmup_steps, warm, decayed)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "decay_steps": self.decay_steps, "alpha": self.alpha}
'''
LEARNING_RATES = [
    ("custom_schedule_adamw", "keras.optimizers.AdamW(WarmupCosine(0.1, 3, 4, alpha=0.2), weight_decay=0.1, clipvalue=0.5)"),
    ("builtin_warmup_sgd", "keras.optimizers.SGD(keras.optimizers.schedules.CosineDecay(0.0, 4, alpha=0.1, warmup_target=0.1, warmup_steps=3), momentum=0.9)"),
    ("piecewise_adam", "keras.optimizers.Adam(keras.optimizers.schedules.PiecewiseConstantDecay([1, 3], [0.1, 0.02, 0.5]))"),
]


@pytest.mark.parametrize("name, before", LEARNING_RATES, ids=[n for n, _ in LEARNING_RATES])
def test_learning_rate_reads_and_steps_match_keras(name, before):
    """Over STEPS updates: the rate read before each one, and the parameters after it, agree with Keras."""
    keras_opt = keras_object(before, CUSTOM_SCHEDULE)
    tx = translated_object(before, CUSTOM_SCHEDULE)
    variables = [tf.Variable(p) for p in initial_params()]
    params = [jnp.asarray(p) for p in initial_params()]
    state = tx.init(params)
    start = initial_params()
    for t, step in enumerate(gradients(name)):
        np.testing.assert_allclose(np.asarray(tx.learning_rate_at(t)), np.asarray(keras_opt.learning_rate),
                                   rtol=RTOL, atol=1e-8, err_msg=f"learning rate before update {t + 1}")
        keras_opt.apply_gradients(zip([tf.constant(g) for g in step], variables))
        updates, state = tx.update([jnp.asarray(g) for g in step], state, params)
        params = optax.apply_updates(params, updates)
        for i, (k, j, p0) in enumerate(zip(variables, params, start)):
            np.testing.assert_allclose(np.asarray(j) - p0, k.numpy() - p0, rtol=RTOL, atol=ATOL,
                                       err_msg=f"update {t + 1}, parameter {i}: displacement differs")


def test_custom_schedule_values_and_config_match_keras():
    """The translated subclass: same values at every step (jitted too, as optax calls it), and
    Keras' from_config(get_config()) round trip."""
    import jax

    keras_schedule = keras_object("WarmupCosine(0.1, 4, 10, alpha=0.2)", CUSTOM_SCHEDULE)
    schedule = translated_object("WarmupCosine(0.1, 4, 10, alpha=0.2)", CUSTOM_SCHEDULE)
    assert type(schedule).__mro__[1].__name__ == "KerasLearningRateSchedule"
    jitted = jax.jit(schedule)
    for step in range(20):
        want = float(keras_schedule(step))
        np.testing.assert_allclose(float(schedule(step)), want, rtol=1e-6, atol=1e-8, err_msg=f"step {step}")
        np.testing.assert_allclose(float(jitted(jnp.int32(step))), want, rtol=1e-6, atol=1e-8, err_msg=f"jit, step {step}")
    restored = type(schedule).from_config(schedule.get_config())
    assert restored.get_config() == keras_schedule.get_config()
