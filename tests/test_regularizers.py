"""Regularization losses as explicit terms, against Keras (issue 4, item 4).

* every ``regularizer`` value record (``kernel_regularizer="l2"``, ``=keras.regularizers.L2``)
  computes what ``keras.regularizers.get`` gives, on rank-2 and rank-4 weights;
* ``fixtures/tf/train_regularized``'s ``make_model`` (kernel L2 on two Dense layers, an
  ``add_loss`` layer, an L1 activity regularizer), translated by tern, with the Keras
  weights ported: after the same forward pass the sown ``losses`` hold as many terms as
  Keras' ``model.losses``, with the same sum, and the same gradients with respect to the
  weights;
* its ``add_loss`` layer: the term of the last call only, also when the collections of an
  earlier pass are passed back in (the reduce replaces), and nothing when ``losses`` is not
  mutable (inference);
* an activity penalty is divided by the batch size, and an empty batch gives 0, as in Keras.

Per-layer, per-regularizer cases (Dense, Conv, Embedding, normalization; L1, L2, L1L2,
orthogonal, strings, class symbols) are in ``rules/layers/cases/*.toml``
(tests/test_layer_cases.py compares their sown terms with Keras' ``layer.losses``); golden
rule cases in ``rules/structure/cases/add_loss.toml`` and
``rules/testing/cases/layer_losses.toml``. Tolerances: rtol = atol = 1e-6 for single
penalties, 1e-5 for the model's sums and gradients (float32).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from tern.engine.records import load_tables  # noqa: E402
from tern.engine.templates import expand_template  # noqa: E402
from tern.engine.translate import translate_source  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "rules"
FIXTURE = ROOT / "fixtures" / "tf" / "train_regularized" / "model.py"
TABLES = load_tables(RULES)
L2, RATE, L1 = 1e-2, 1e-1, 1e-2  # the fixture's test constants


def _module(name: str, code: str) -> types.ModuleType:
    module = types.ModuleType(name)  # flax dataclasses need a real module
    sys.modules[name] = module
    exec(compile(code, name, "exec"), module.__dict__)  # noqa: S102
    return module


@pytest.fixture(scope="module")
def support():
    code = "".join((RULES / "support" / f"{n}.py").read_text() + "\n" for n in (
        "KerasL1L2", "KerasOrthogonalRegularizer", "keras_add_loss", "keras_model_losses"))
    return _module("tern_regularizer_support", code).__dict__


@pytest.fixture(scope="module")
def translated():
    """The fixture's model.py as tern translates it (no TensorFlow left in it)."""
    result = translate_source(FIXTURE.read_text(), is_test=False)
    assert "TODO(tern)" not in result.code, result.code
    assert "tensorflow" not in result.code and "keras." not in result.code
    return _module("tern_regularized_model", result.code)


@pytest.fixture(scope="module")
def original():
    spec = importlib.util.spec_from_file_location("tf_regularized_model", FIXTURE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------ value records

REGULARIZER_VALUES = sorted(source for kind, source in TABLES.values if kind == "regularizer")


def _keras_regularizer(source: str):
    if "." not in source:
        return keras.regularizers.get(source)
    obj = keras
    for part in source.split(".")[1:]:
        obj = getattr(obj, part)
    return keras.regularizers.get(obj)


class _Ctx:
    """Just enough of a translation context to expand a value target."""

    def __init__(self):
        self.support, self.value_tables = set(), set()

    def target_expr(self, text):
        import libcst as cst

        return cst.parse_expression(text)


@pytest.mark.parametrize("source", REGULARIZER_VALUES)
@pytest.mark.parametrize("shape", [(5, 3), (3, 3, 2, 4)], ids=["rank2", "rank4"])
def test_regularizer_values_match_keras(source, shape, support):
    import libcst as cst

    target = cst.Module([]).code_for_node(expand_template(TABLES.value("regularizer", source).target, {}, _Ctx()))
    ours = eval(target, dict(support))  # noqa: S307
    theirs = _keras_regularizer(source)
    w = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    if type(theirs).__name__ == "OrthogonalRegularizer" and len(shape) != 2:
        with pytest.raises(ValueError):
            theirs(tf.constant(w))
        with pytest.raises(ValueError):
            ours(jnp.asarray(w))
        return
    # a tensor, as a layer passes its variable (Keras normalizes NumPy arrays another way)
    np.testing.assert_allclose(np.asarray(ours(jnp.asarray(w))), np.asarray(theirs(tf.constant(w))), rtol=1e-6, atol=1e-6)


def test_l2_and_l1_strings_are_keras_defaults(support):
    """'l1'/'l2' mean factor 0.01, 'l1l2' means no penalty at all (L1L2's defaults are 0.0)."""
    w = np.ones((2, 2), np.float32)
    assert float(keras.regularizers.get("l2")(w)) == pytest.approx(0.04)
    assert float(keras.regularizers.get("l1l2")(w)) == 0.0
    with pytest.raises(ValueError):
        keras.regularizers.get("l1_l2")  # hence no record: a TODO
    with pytest.raises(ValueError):
        support["KerasL1L2"](l2=-1.0)  # validated as Keras does


# ------------------------------------------------------------------------ make_model


def _ported(original, translated, x):
    keras.utils.set_random_seed(0)
    model = original.make_model(l2=L2, activity_rate=RATE, l1_activity=L1)
    flax_model = translated.make_model(l2=L2, activity_rate=RATE, l1_activity=L1)
    variables = flax_model.init(jax.random.key(0), jnp.asarray(x))
    assert set(variables) == {"params", "losses"}
    assert sorted(variables["params"]) == ["hidden", "output"]  # a functional layer's Keras name= is its Flax name
    params = {
        name: {"kernel": jnp.asarray(model.get_layer(name).kernel.numpy()),
               "bias": jnp.asarray(model.get_layer(name).bias.numpy())}
        for name in ("hidden", "output")
    }
    return model, flax_model, {**variables, "params": params}


def test_make_model_losses_match_keras(original, translated, support):
    x = np.random.default_rng(0).standard_normal((16, 4)).astype("float32")
    model, flax_model, variables = _ported(original, translated, x)
    expected_out = np.asarray(model(x))
    expected = [np.asarray(t) for t in model.losses]
    out, updates = flax_model.apply(variables, jnp.asarray(x), mutable=["losses"])
    np.testing.assert_allclose(np.asarray(out), expected_out, rtol=1e-5, atol=1e-5)
    terms = support["keras_model_losses"](updates)
    assert len(terms) == len(expected) == 4  # two kernel L2 terms, add_loss, activity L1
    np.testing.assert_allclose(float(sum(terms)), float(np.sum(expected)), rtol=1e-5, atol=1e-5)


def test_make_model_loss_gradients_match_keras(original, translated, support):
    """The terms are computed from the params of the pass: gradients flow through them."""
    x = np.random.default_rng(1).standard_normal((8, 4)).astype("float32")
    model, flax_model, variables = _ported(original, translated, x)
    weights = [model.get_layer(n).kernel for n in ("hidden", "output")] + [model.get_layer(n).bias for n in ("hidden", "output")]
    with tf.GradientTape() as tape:
        model(x, training=True)
        total = tf.add_n(model.losses)
    expected = [np.asarray(g) for g in tape.gradient(total, weights)]

    def regularization(params):
        _, updates = flax_model.apply({**variables, "params": params}, jnp.asarray(x), training=True, mutable=["losses"])
        return sum(support["keras_model_losses"](updates))

    grads = jax.grad(regularization)(variables["params"])
    got = [grads["hidden"]["kernel"], grads["output"]["kernel"], grads["hidden"]["bias"], grads["output"]["bias"]]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), e, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------ add_loss


def test_add_loss_layer_matches_keras_and_replaces_stale_terms(original, translated, support):
    x = np.array([[1.0, -2.0], [3.0, 0.0]], "float32")
    keras_layer = original.ActivityRegularizationLayer(rate=0.5)
    layer = translated.ActivityRegularizationLayer(rate=0.5)
    variables = layer.init(jax.random.key(0), jnp.asarray(x))
    assert "losses" in variables  # a train state built from init carries the collection
    for inputs in (x, 2 * x):  # the collections of the previous pass go back in
        keras_layer(inputs)
        out, updates = layer.apply(variables, jnp.asarray(inputs), mutable=["losses"])
        variables = {**variables, **updates}
        terms = support["keras_model_losses"](updates)
        assert len(terms) == len(keras_layer.losses) == 1
        np.testing.assert_allclose(np.asarray(terms[0]), np.asarray(keras_layer.losses[0]), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(out), inputs)
    out = layer.apply(variables, jnp.asarray(x))  # inference: `losses` not mutable, sow does nothing
    np.testing.assert_allclose(np.asarray(out), x)


def test_model_losses_without_the_collection(support):
    assert support["keras_model_losses"]({"params": {}}) == []


# ------------------------------------------------------------------------ activity division


@pytest.mark.parametrize("batch", [4, 0])
def test_activity_penalty_is_divided_by_the_batch_size(batch):
    keras_layer = keras.layers.Dense(3, activity_regularizer=keras.regularizers.L1(1.0), kernel_initializer="ones")
    x = np.ones((batch, 2), np.float32)
    keras_layer(x)
    code = translate_source("import keras\nlayer = keras.layers.Dense(3, activity_regularizer=keras.regularizers.L1(1.0), "
                            "kernel_initializer='ones')\n").code
    layer = _module(f"tern_activity_{batch}", code).layer
    variables = layer.init(jax.random.key(0), jnp.ones((1, 2)))
    _, updates = layer.apply(variables, jnp.asarray(x), mutable=["losses"])
    (term,) = jax.tree_util.tree_leaves(updates["losses"])
    (expected,) = keras_layer.losses
    assert float(term) == pytest.approx(float(expected)) == pytest.approx(6.0 if batch else 0.0)
