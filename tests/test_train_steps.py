"""GradientTape steps: which functions tern recognizes, and that the translated step trains
exactly as Keras does (same ported weights, same batches, three steps).

Tolerances: float32 with Adam over three steps, rtol 1e-5 / atol 1e-6 on losses and
gradient norms, atol 1e-5 on parameters and BatchNorm statistics.
"""

from __future__ import annotations

import ast

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf

from tern.engine.support_module import objects
from tern.features.training.train_steps import analyse
from tern.engine.translate import translate_source
from tern.verify.graft import flatten, graft
from tern.verify.port import keras_units
from tests.translated_objects import original_and_translated, translated_object

STEP = '''
@tf.function
def train_step(model, optimizer, loss_fn, x, y):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = loss_fn(y, logits)
    grads = tape.gradient(loss, model.trainable_variables)
    grads, norm = tf.clip_by_global_norm(grads, 0.5)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss, norm
'''


def _sigs(source: str):
    tree = ast.parse(source)
    return analyse([n for n in tree.body if isinstance(n, ast.FunctionDef)])


def test_a_step_its_loop_and_its_readers_are_recognized():
    sigs, refusals = _sigs(STEP + '''
def evaluate(model, x):
    return model(x, training=False)


def fit(model, optimizer, loss_fn, batches):
    optimizer.build(model.trainable_variables)
    for x, y in batches:
        loss, _ = train_step(model, optimizer, loss_fn, x, y)
    return loss, evaluate(model, batches[0][0])
''')
    assert {name: sig.kind for name, sig in sigs.items()} == {"train_step": "step", "evaluate": "reader", "fit": "threader"}
    assert (sigs["fit"].model, sigs["fit"].optimizer) == ("model", "optimizer")
    assert refusals == {}


@pytest.mark.parametrize("source, reason", [
    (STEP.replace("tf.GradientTape()", "tf.GradientTape(persistent=True)"), "persistent"),
    (STEP.replace("        logits = model(x, training=True)\n", "        stale = sum(model.losses)\n        logits = model(x, training=True)\n"),
     "before the model's call"),
    (STEP.replace("        logits = model(x, training=True)\n", "        tape.watch(x)\n        logits = model(x, training=True)\n"), "tape.watch"),
    (STEP.replace("    grads, norm = tf.clip_by_global_norm(grads, 0.5)\n", "    grads = [g * 2 for g in grads]\n    norm = 0\n"),
     "pytree shaped like the params"),
    (STEP.replace("        loss = loss_fn(y, logits)\n", "        loss = loss_fn(y, logits)\n        other = model(x)\n"), "more than once"),
    (STEP + "\ndef loop(model, optimizer, loss_fn, x, y):\n    return [train_step(model, optimizer, loss_fn, x, y) for _ in range(3) if x]\n",
     "comprehension"),
    (STEP + "\ndef loop(model, optimizer, loss_fn, x, y):\n    return list(map(lambda _: train_step(model, optimizer, loss_fn, x, y), range(3)))\n",
     "lambda"),
    (STEP + "\ndef loop(model, optimizer, loss_fn, x, y):\n    if train_step(model, optimizer, loss_fn, x, y)[0] > 1:\n        return 1\n",
     "header"),
    (STEP + "\ndef loop(model, make, loss_fn, x, y):\n    optimizer = make()\n    return train_step(model, optimizer, loss_fn, x, y)\n",
     "without a top-level `optimizer.build(model.trainable_variables)`"),
])
def test_shapes_tern_cannot_translate_give_their_reason(source, reason):
    sigs, refusals = _sigs(source)
    assert reason in " ".join(refusals.values()), refusals


def test_a_function_without_an_optimizer_update_is_not_a_step():
    sigs, refusals = _sigs("def grad_of(model, x):\n    with tf.GradientTape() as tape:\n        y = model(x)\n    return tape.gradient(y, x)\n")
    assert sigs == {} and refusals == {}


MODEL = '''
import tensorflow as tf


def make_model():
    return tf.keras.Sequential([
        tf.keras.Input((3,)),
        tf.keras.layers.Dense(4, activation="tanh"),
        tf.keras.layers.BatchNormalization(),
        tf.keras.layers.Dense(2),
    ])
'''


@pytest.fixture(scope="module")
def both_sides():
    return original_and_translated(MODEL + STEP)


def test_the_translated_step_is_pure_and_jitted(both_sides):
    _, _, code = both_sides
    assert "def train_step(state, loss_fn, x, y):" in code
    assert 'static_argnames=("loss_fn",)' in code
    assert "jax.value_and_grad(compute_loss, has_aux=True)(state.params)" in code
    assert "return state, (loss, norm)" in code


def test_three_adam_steps_match_keras(both_sides):
    original, translated, _ = both_sides
    tf.keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((8, 3)).astype("float32"), rng.integers(0, 2, 8).astype("int32")) for _ in range(3)]

    keras_model = original["make_model"]()
    initial_units = keras_units(keras_model)
    optimizer = tf.keras.optimizers.Adam(learning_rate=0.05)
    optimizer.build(keras_model.trainable_variables)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    keras_out = [tuple(float(v) for v in original["train_step"](keras_model, optimizer, loss_fn, x, y)) for x, y in batches]

    module = translated["make_model"]()
    init = module.init(jax.random.key(0), jnp.zeros((1, 3)))
    variables, problems = graft(init, initial_units)
    assert not problems
    state = translated["KerasTrainState"].from_variables(
        module.apply, variables, translated_object("tf.keras.optimizers.Adam(learning_rate=0.05)"))
    jax_loss = translated_object("tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)")
    jax_out = []
    for x, y in batches:
        state, (loss, norm) = translated["train_step"](state, jax_loss, x, y)
        jax_out.append((float(loss), float(norm)))

    np.testing.assert_allclose(jax_out, keras_out, rtol=1e-5, atol=1e-6)
    assert int(state.step) == int(optimizer.iterations) == 3
    want, _ = graft(init, keras_units(keras_model))
    got, want = flatten(state.variables()), flatten(want)
    assert got.keys() == want.keys()
    for path in want:
        np.testing.assert_allclose(got[path], want[path], atol=1e-5, err_msg="/".join(path))


def test_a_wrong_optimizer_default_is_caught(both_sides):
    """The same comparison with optax's own Adam epsilon placement differs: the test can fail."""
    original, translated, _ = both_sides
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((8, 3)).astype("float32"), rng.integers(0, 2, 8).astype("int32")
    keras_model = original["make_model"]()
    units = keras_units(keras_model)
    optimizer = tf.keras.optimizers.Adam(learning_rate=0.05)
    optimizer.build(keras_model.trainable_variables)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for _ in range(3):
        original["train_step"](keras_model, optimizer, loss_fn, x, y)
    import optax

    module = translated["make_model"]()
    init = module.init(jax.random.key(0), jnp.zeros((1, 3)))
    state = translated["KerasTrainState"].from_variables(module.apply, graft(init, units)[0], optax.adam(0.05))
    jax_loss = translated_object("tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)")
    for _ in range(3):
        state, _ = translated["train_step"](state, jax_loss, x, y)
    got, want = flatten(state.variables()), flatten(graft(init, keras_units(keras_model))[0])
    assert max(float(np.max(np.abs(got[p] - want[p]))) for p in want) > 1e-5


FROZEN = '''
import tensorflow as tf


def make_model():
    inputs = tf.keras.Input((3,))
    x = tf.keras.layers.Dense(4, activation="tanh", name="body")(inputs)
    outputs = tf.keras.layers.Dense(2, name="head")(x)
    return tf.keras.Model(inputs, outputs)


def freeze_backbone(model, head_name="head"):
    for layer in model.layers:
        if layer.name != head_name:
            layer.trainable = False
    return model
'''


def test_frozen_layers_match_keras_over_three_adamw_steps():
    """Keras' optimizer only sees trainable variables: no update, no weight decay for the frozen
    body; the head follows AdamW exactly. Without the mask the body would decay and move."""
    source = FROZEN + STEP
    original: dict = {}
    exec(compile(source, "<original>", "exec"), original)  # noqa: S102 - test source above
    result = translate_source(source)
    assert not result.todos, result.code
    assert "for layer in KerasLayer.all(model):" in result.code and 'name="head"' in result.code
    translated: dict = objects()  # every support definition, not only those the code imports
    exec(compile(result.code, "<translation>", "exec"), translated)  # noqa: S102
    rng = np.random.default_rng(2)
    batches = [(rng.standard_normal((8, 3)).astype("float32"), rng.integers(0, 2, 8).astype("int32")) for _ in range(3)]
    adamw = "tf.keras.optimizers.AdamW(learning_rate=0.05, weight_decay=0.1)"

    tf.keras.utils.set_random_seed(0)
    keras_model = original["freeze_backbone"](original["make_model"]())
    units = keras_units(keras_model)
    assert [v.path for v in keras_model.trainable_variables] == ["head/kernel", "head/bias"]
    optimizer = eval(adamw)  # noqa: S307 - the literal above
    optimizer.build(keras_model.trainable_variables)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    keras_out = [tuple(float(v) for v in original["train_step"](keras_model, optimizer, loss_fn, x, y)) for x, y in batches]

    module = translated["freeze_backbone"](translated["make_model"]())
    assert translated["KerasLayer"].get(module, "body").trainable is False
    init = module.init(jax.random.key(0), jnp.zeros((1, 3)))
    variables, problems = graft(init, units)
    assert not problems
    jax_loss = translated_object("tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)")

    def run(state):
        out = []
        for x, y in batches:
            state, (loss, norm) = translated["train_step"](state, jax_loss, x, y)
            out.append((float(loss), float(norm)))
        return state, out

    state, jax_out = run(translated["KerasTrainState"].of_module(module, variables, translated_object(adamw)))
    np.testing.assert_allclose(jax_out, keras_out, rtol=1e-5, atol=1e-6)
    want, _ = graft(init, keras_units(keras_model))
    got, want, before = flatten(state.variables()), flatten(want), flatten(variables)
    assert got.keys() == want.keys()
    for path in want:
        np.testing.assert_allclose(got[path], want[path], rtol=1e-5, atol=1e-6, err_msg="/".join(path))
        if "body" in path:
            np.testing.assert_array_equal(got[path], before[path])
        else:
            assert np.max(np.abs(got[path] - before[path])) > 1e-3, path

    unmasked, _ = run(translated["KerasTrainState"].from_variables(module.apply, variables, translated_object(adamw)))
    moved = flatten(unmasked.variables())
    assert max(float(np.max(np.abs(moved[p] - want[p]))) for p in want if "body" in p) > 1e-3
