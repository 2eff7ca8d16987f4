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

``optimizer.variables`` in translated tests (``_tern_optimizer_variables``, testing/
train_state_calls.py) is compared with Keras' list the same way: a test's own variables
under one optimizer per slot layout the runtime knows, and a model (with a frozen layer)
through a translated GradientTape step.
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


# `optimizer.variables` in translated tests (testing/train_state_calls.py): Keras' list after
# STEPS updates of a test's own variables, one case per entry of _TERN_KERAS_SLOTS plus a
# schedule (no learning-rate variable then). Structure first (length, shapes), then values.
# The parameters have four different shapes, so a wrong order (Adam interleaves momentum and
# velocity per variable; RMSprop lists all velocities, then all momentums, then the average
# gradients) shows as a shape mismatch, and a wrong slot or sign as a value mismatch. Values
# are float32 optimizer state after five updates (measured: 3e-5 relative at most):
# rtol 1e-4, atol 1e-6.
SLOT_CASES = [
    ("sgd", "keras.optimizers.SGD(0.1)"),
    ("sgd_momentum", "keras.optimizers.SGD(0.1, momentum=0.9)"),
    ("sgd_nesterov_decay_clip", "keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True, weight_decay=0.01, clipnorm=1.0)"),
    ("adam", "keras.optimizers.Adam(0.1)"),
    ("adam_schedule", "keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(0.1, 2, 0.5))"),
    ("adam_amsgrad", "keras.optimizers.Adam(0.1, amsgrad=True)"),
    ("adamw_clip", "keras.optimizers.AdamW(0.1, global_clipnorm=1.0)"),
    ("rmsprop", "keras.optimizers.RMSprop(0.1)"),
    ("rmsprop_momentum", "keras.optimizers.RMSprop(0.1, momentum=0.9)"),
    ("rmsprop_centered", "keras.optimizers.RMSprop(0.1, centered=True)"),
    ("rmsprop_momentum_centered", "keras.optimizers.RMSprop(0.1, momentum=0.9, centered=True)"),
    ("adagrad", "keras.optimizers.Adagrad(0.1)"),
    ("adadelta", "keras.optimizers.Adadelta(1.0)"),
    ("lion", "keras.optimizers.Lion(0.1)"),
]
UNMAPPED = [("adamax", "keras.optimizers.Adamax(0.1)"), ("nadam", "keras.optimizers.Nadam(0.1)")]
SLOTS_OF = '''

def slots_{name}(values, steps):
    optimizer = {before}
    variables = [tf.Variable(v) for v in values]
    for grads in steps:
        optimizer.apply_gradients(zip([tf.constant(g) for g in grads], variables))
    return [v.numpy() for v in optimizer.variables]
'''
SLOTS_TEST = "import tensorflow as tf\nimport keras\n" + "".join(
    SLOTS_OF.format(name=n, before=b) for n, b in SLOT_CASES + UNMAPPED) + '''

def slots_before_an_update():
    plain = keras.optimizers.SGD(0.1)
    return [v.numpy() for v in plain.variables]


def adam_slots_before_an_update():
    optimizer = keras.optimizers.Adam(0.1)
    return optimizer.variables
'''


@pytest.fixture(scope="module")
def slot_programs():
    from tern.engine.translate import translate_source

    result = translate_source(SLOTS_TEST, is_test=True)
    assert not result.todos, result.code
    assert "_tern_optimizer_variables(optimizer)" in result.code
    jax_ns: dict = {}
    exec(compile(result.code, "<translation>", "exec"), jax_ns)  # noqa: S102 - tern's own output
    tf_ns: dict = {"__name__": "keras_slots"}
    exec(compile(SLOTS_TEST, "<keras>", "exec"), tf_ns)  # noqa: S102
    return tf_ns, jax_ns


def same_slots(got, want) -> None:
    assert [np.shape(v) for v in got] == [np.shape(v) for v in want], "count or order of the variables"
    for i, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-4, atol=1e-6,
                                   err_msg=f"optimizer variable {i}")


@pytest.mark.parametrize("name", [n for n, _ in SLOT_CASES])
def test_optimizer_variables_are_keras_in_order_and_value(slot_programs, name):
    tf_ns, jax_ns = slot_programs
    grads = gradients(name)
    same_slots(jax_ns[f"slots_{name}"](initial_params(), grads), tf_ns[f"slots_{name}"](initial_params(), grads))


def test_optimizer_variables_refuse_what_is_not_known(slot_programs):
    """Slots not checked against Keras (the optimizer's, or Keras' before build) raise instead of guessing."""
    tf_ns, jax_ns = slot_programs
    for name, _ in UNMAPPED:
        with pytest.raises(NotImplementedError, match="Adamax and Nadam"):
            jax_ns[f"slots_{name}"](initial_params(), gradients(name))
    same_slots(jax_ns["slots_before_an_update"](), tf_ns["slots_before_an_update"]())  # [iterations, lr] either way
    with pytest.raises(ValueError, match="before the optimizer's first update"):
        jax_ns["adam_slots_before_an_update"]()


# A model's parameters: the optimizer's slots follow the model's trainable variables (a Dense
# kernel before its bias), where the optax state holds them as dicts in sorted key order
# (bias before kernel); a layer frozen with `trainable = False` has none (optax masks it). The
# step is a package GradientTape step, translated; two updates from the same weights (ones).
SLOT_LIBRARY = '''
import tensorflow as tf


def build():
    inputs = tf.keras.Input(shape=(4,))
    hidden = tf.keras.layers.Dense(2, kernel_initializer="ones", name="first")(inputs)
    return tf.keras.Model(inputs, tf.keras.layers.Dense(2, kernel_initializer="ones", name="last")(hidden))


def freeze(model, name):
    model.get_layer(name).trainable = False


def train_step(model, optimizer, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
'''
MODEL_SLOTS_OF = '''

def {name}_slots(x, y):
    model = build()
    {freeze}
    optimizer = {before}
    for _ in range(2):
        train_step(model, optimizer, x, y)
    return [v.numpy() for v in optimizer.variables]
'''
MODEL_SLOT_CASES = [
    ("adam", "pass", "tf.keras.optimizers.Adam(0.1)"),
    ("sgd", "pass", "tf.keras.optimizers.SGD(0.1, momentum=0.9)"),
    ("frozen_adam", "freeze(model, \"first\")", "tf.keras.optimizers.Adam(0.1)"),
]
SLOT_MODEL_TEST = "import tensorflow as tf\n\nfrom tern_slots_pkg.model import build, freeze, train_step\n" + "".join(
    MODEL_SLOTS_OF.format(name=n, freeze=f, before=b) for n, f, b in MODEL_SLOT_CASES)


def test_a_models_optimizer_variables_follow_its_keras_weight_order():
    import sys
    import types

    import jax

    from tern.engine.package import PackageInfo, close_over_bases, scan_source, training_layer_names
    from tern.engine.translate import translate_source

    info = PackageInfo()
    scan_source(SLOT_LIBRARY, "tern_slots_pkg.model", info, training_layer_names())
    scan_source(SLOT_MODEL_TEST, "tern_slots_pkg.model_test", info, training_layer_names())
    close_over_bases(info)
    library = translate_source(SLOT_LIBRARY, package=info)
    test = translate_source(SLOT_MODEL_TEST, is_test=True, package=info)
    assert not library.todos and not test.todos, test.code
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 4)).astype("float32"), rng.standard_normal((8, 2)).astype("float32")
    names = ("tern_slots_pkg", "tern_slots_pkg.model", "tern_slots_pkg.model_test")
    try:
        def load(codes):
            for name, code in zip(names, codes):
                module = types.ModuleType(name)  # flax dataclasses look their module up in sys.modules
                module.__path__ = []
                sys.modules[name] = module
                exec(compile(code, name, "exec"), module.__dict__)  # noqa: S102
            return sys.modules[names[-1]]

        keras_test = load(("", SLOT_LIBRARY, SLOT_MODEL_TEST))
        want = {n: getattr(keras_test, f"{n}_slots")(x, y) for n, _, _ in MODEL_SLOT_CASES}
        assert len(want["frozen_adam"]) == len(want["adam"]) - 4  # no momentum, velocity for its kernel, bias
        jax_test = load(("", library.code, test.code))
        jax_test.train_step = jax.jit(jax_test.train_step)  # one compilation per optimizer, not one per operation
        for name, _, _ in MODEL_SLOT_CASES:
            same_slots(getattr(jax_test, f"{name}_slots")(x, y), want[name])
    finally:
        for name in names:
            sys.modules.pop(name, None)
