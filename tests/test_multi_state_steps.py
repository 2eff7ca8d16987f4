"""Steps over several (model, optimizer) pairs (a WGAN-GP critic and generator), input-gradient
tapes nested in a loss, and tf.random draws in functions that take a train state.

The numeric test runs the same WGAN-GP step (two critic updates and one generator update,
a gradient penalty through a nested tape, fixed noise and interpolation so both sides see
the same numbers) three times in Keras and in the translation from the same weights.
Tolerances: float32 Adam over 3 x 3 updates with a second-order penalty term: rtol 1e-4 /
atol 1e-5 on losses, atol 1e-5 on parameters.
"""

from __future__ import annotations

import ast

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

from tern.features.training.train_steps import analyse
from tern.engine.translate import translate_source
from tern.verify.graft import flatten, graft
from tern.verify.port import keras_units
from tests.translated_objects import original_and_translated, translated_object

MODELS = '''
import tensorflow as tf


def make_generator():
    return tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(8, activation="tanh"), tf.keras.layers.Dense(2)])


def make_critic():
    return tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(8, activation="tanh"), tf.keras.layers.Dense(1)])


def gradient_penalty(critic, real, fake):
    interpolated = real + 0.25 * (fake - real)
    with tf.GradientTape() as gp_tape:
        gp_tape.watch(interpolated)
        scores = critic(interpolated, training=True)
    grads = gp_tape.gradient(scores, [interpolated])[0]
    norm = tf.sqrt(tf.reduce_sum(tf.square(grads), axis=1))
    return tf.reduce_mean((norm - 1.0) ** 2)
'''

STEP = '''

@tf.function
def train_step(generator, critic, generator_optimizer, critic_optimizer, real, noise, n_critic=2, gp_weight=10.0):
    for _ in range(n_critic):
        with tf.GradientTape() as tape:
            fake = tf.stop_gradient(generator(noise, training=True))
            gp = gradient_penalty(critic, real, fake)
            c_loss = tf.reduce_mean(critic(fake, training=True)) - tf.reduce_mean(critic(real, training=True)) + gp_weight * gp
        c_grads = tape.gradient(c_loss, critic.trainable_variables)
        critic_optimizer.apply_gradients(zip(c_grads, critic.trainable_variables))
    with tf.GradientTape() as tape:
        g_loss = -tf.reduce_mean(critic(generator(noise, training=True), training=True))
    g_grads = tape.gradient(g_loss, generator.trainable_variables)
    generator_optimizer.apply_gradients(zip(g_grads, generator.trainable_variables))
    return c_loss, g_loss, gp


def train(generator, critic, generator_optimizer, critic_optimizer, batches, noise):
    generator_optimizer.build(generator.trainable_variables)
    critic_optimizer.build(critic.trainable_variables)
    losses = []
    for real in batches:
        losses.append(train_step(generator, critic, generator_optimizer, critic_optimizer, real, noise))
    return losses
'''


def _sigs(source: str):
    tree = ast.parse(source)
    return analyse([n for n in tree.body if isinstance(n, ast.FunctionDef)])


def test_the_step_its_loop_and_the_penalty_are_recognized():
    sigs, refusals = _sigs(MODELS + STEP)
    assert refusals == {}
    assert sigs["gradient_penalty"].kind == "reader"
    step, loop = sigs["train_step"], sigs["train"]
    assert (step.kind, loop.kind) == ("step", "threader")
    assert step.pairs == loop.pairs == (("generator", "generator_optimizer"), ("critic", "critic_optimizer"))
    assert step.draws == (("critic_state", (0,)), ("generator_state", ()))  # the critic's tape is in loop 0


@pytest.mark.parametrize("change, reason", [
    (("critic_optimizer.apply_gradients(zip(c_grads, critic.trainable_variables))",
      "generator_optimizer.apply_gradients(zip(c_grads, critic.trainable_variables))"), "updating two models"),
    (("    return c_loss, g_loss, gp\n", "    print(critic.layers)\n    return c_loss, g_loss, gp\n"), "used for more than"),
    (("    return c_loss, g_loss, gp\n",
      "    with tf.GradientTape() as other:\n        other.watch(real)\n        y = critic(real)\n    return c_loss, g_loss, other.gradient(y, real)\n"),
     "a tape other than the training tapes"),
    (("    for _ in range(n_critic):\n", "    gp = 0.0\n    for _ in range(n_critic):\n"), "bound both inside a tape"),
    (("tf.GradientTape() as tape:\n            fake", "tf.GradientTape(persistent=True) as tape:\n            fake"), "persistent"),
])
def test_shapes_tern_cannot_translate_give_their_reason(change, reason):
    source = MODELS + STEP.replace(*change)
    assert source != MODELS + STEP
    _, refusals = _sigs(source)
    assert reason in refusals.get("train_step", ""), refusals


@pytest.fixture(scope="module")
def both_sides():
    return original_and_translated(MODELS + STEP)


def test_each_model_gets_its_state_and_the_penalty_nests_jax_grad(both_sides):
    _, _, code = both_sides
    assert "def train_step(generator_state, critic_state, real, noise, n_critic=2, gp_weight=10.0):" in code
    assert "critic = critic_state.replace(params=critic_params)" in code
    assert "gp = gradient_penalty(critic, real, fake)" in code
    assert "gp_tape_grads = jax.grad(gp_tape_target)(interpolated)" in code
    assert "generator_state, critic_state, losses_item = " not in code
    assert "def train(generator_state, critic_state, batches, noise):" in code
    assert "return generator_state, critic_state, losses" in code


def test_three_wgan_gp_steps_match_keras(both_sides):
    original, translated, _ = both_sides
    tf.keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    batches = [(np.array([2.0, -1.0]) + 0.3 * rng.standard_normal((8, 2))).astype("float32") for _ in range(3)]
    noise = rng.standard_normal((8, 2)).astype("float32")

    generator, critic = original["make_generator"](), original["make_critic"]()
    units = {"generator": keras_units(generator), "critic": keras_units(critic)}
    adam = "tf.keras.optimizers.Adam(learning_rate=0.01, beta_1=0.5, beta_2=0.9)"
    g_opt, c_opt = (tf.keras.optimizers.Adam(learning_rate=0.01, beta_1=0.5, beta_2=0.9) for _ in range(2))
    keras_losses = [[float(v) for v in out] for out in original["train"](generator, critic, g_opt, c_opt, batches, noise)]

    states, inits = {}, {}
    for name, make in (("generator", "make_generator"), ("critic", "make_critic")):
        module = translated[make]()
        inits[name] = module.init(jax.random.key(0), jnp.zeros((1, 2)))
        variables, problems = graft(inits[name], units[name])
        assert not problems
        states[name] = translated["KerasTrainState"].from_variables(module.apply, variables, translated_object(adam))
    g_state, c_state, losses = translated["train"](states["generator"], states["critic"], batches, noise)
    jax_losses = [[float(v) for v in out] for out in losses]

    np.testing.assert_allclose(jax_losses, keras_losses, rtol=1e-4, atol=1e-5)
    assert (int(c_state.step), int(g_state.step)) == (int(c_opt.iterations), int(g_opt.iterations)) == (6, 3)
    for name, state, model in (("generator", g_state, generator), ("critic", c_state, critic)):
        want, _ = graft(inits[name], keras_units(model))
        got, want = flatten(state.variables()), flatten(want)
        for path in want:
            np.testing.assert_allclose(got[path], want[path], atol=1e-5, err_msg=f"{name}: {'/'.join(path)}")


def test_a_penalty_without_its_second_order_term_is_caught(both_sides):
    """The critic's update differs when the penalty's own gradient is cut: the comparison can fail."""
    original, translated, _ = both_sides
    interpolated = np.array([[0.3, -0.2], [1.0, 0.5]], "float32")
    critic = original["make_critic"]()
    module = translated["make_critic"]()
    init = module.init(jax.random.key(0), jnp.zeros((1, 2)))
    state = translated["KerasTrainState"].from_variables(module.apply, graft(init, keras_units(critic))[0],
                                                         translated_object("tf.keras.optimizers.SGD()"))
    real, fake = interpolated, np.zeros_like(interpolated)
    with tf.GradientTape() as tape:
        gp = original["gradient_penalty"](critic, tf.constant(real), tf.constant(fake))
    keras_grads = [None if g is None else g.numpy() for g in tape.gradient(gp, critic.trainable_variables)]

    def penalty(params, cut=False):
        inner = state.replace(params=jax.lax.stop_gradient(params) if cut else params)
        return translated["gradient_penalty"](inner, real, fake)

    got = jax.grad(penalty)(state.params)
    cut = jax.grad(lambda p: penalty(p, cut=True))(state.params)
    kernel = ("layers_0", "layers_0", "kernel")  # the first Dense (with its tanh, a nn.Sequential of its own)
    np.testing.assert_allclose(np.asarray(flatten(got)[kernel]), keras_grads[0], rtol=1e-4, atol=1e-6)
    assert keras_grads[-1] is None  # the last bias does not move the input gradient: TF gives None, JAX zeros
    assert float(np.max(np.abs(np.asarray(flatten(cut)[kernel])))) == 0.0
    assert float(np.max(np.abs(keras_grads[0]))) > 1e-3


DRAWS = '''
import tensorflow as tf


def penalty(critic, real):
    alpha = tf.random.uniform([4, 1])
    return critic(real * alpha, training=False)


def noisy(critic, real):
    return [critic(real + tf.random.normal([4, 2]), training=False) for _ in range(3)]
'''


def test_draws_take_the_state_key_unless_they_would_repeat():
    result = translate_source(DRAWS)
    assert 'jax.random.uniform(state.draw_key("penalty:0"), [4, 1])' in result.code
    draws = [t for t in result.todos if t.construct == "tf.random.normal"]
    assert len(draws) == 1 and "same key every time" in draws[0].reason


def test_draw_keys_differ_by_site_and_step(both_sides):
    _, translated, _ = both_sides
    module = translated["make_critic"]()
    state = translated["KerasTrainState"].from_variables(
        module.apply, module.init(jax.random.key(0), jnp.zeros((1, 2))), translated_object("tf.keras.optimizers.SGD()"))
    keys = [state.draw_key("a:0"), state.draw_key("a:1"), state.replace(step=state.step + 1).draw_key("a:0")]
    data = [tuple(np.asarray(jax.random.key_data(k)).ravel()) for k in keys]
    assert len(set(data)) == 3
    assert tuple(np.asarray(jax.random.key_data(state.draw_key("a:0"))).ravel()) == data[0]  # a rerun draws the same


def _run_translated_tests(code: str) -> None:
    namespace: dict = {}
    exec(compile(code, "<translated test>", "exec"), namespace)  # noqa: S102 - tern's translation of a case
    for name, fn in list(namespace.items()):
        if name.startswith("test_"):
            fn()


def test_tapes_in_tests_give_keras_gradients_in_keras_order():
    """The golden cases of rules/testing/cases/test_tapes.toml, run: kernel and bias gradients (in
    Keras' trainable_variables order) of a model's weights, and an input gradient."""
    import tomllib
    from pathlib import Path

    cases = tomllib.loads((Path(__file__).parents[1] / "rules/testing/cases/test_tapes.toml").read_text())["case"]
    for case in cases[:2]:
        _run_translated_tests(translate_source(case["before"], is_test=True).code)


def test_a_model_built_inside_a_test_tape_is_refused_clearly():
    source = '''
import numpy as np
import tensorflow as tf


def test_built_inside():
    layer = tf.keras.layers.Dense(1)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(np.ones((2, 3), "float32")))
    tape.gradient(loss, layer.trainable_variables)
'''
    with pytest.raises(ValueError, match="built inside the tape"):
        _run_translated_tests(translate_source(source, is_test=True).code)
