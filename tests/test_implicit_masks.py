"""Keras' implicit masks: the rule's table against the installed Keras, and the masked forms
against Keras numerically (rules/structure/implicit_masks.*, rules/support/KerasMaskedRNN.py,
keras_masked_mean.py). Golden cases: rules/structure/cases/implicit_masks.toml.

Tolerances: float32, atol 1e-5 (the same cells as the layer cases, over 6 steps).
"""

from __future__ import annotations

import inspect
import os
import sys
import types
import tomllib
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from keras.src.layers.layer import Layer  # noqa: E402

from tern.engine.records import load_tables  # noqa: E402
from tern.engine.support_module import objects  # noqa: E402
from tern.engine.translate import translate_source  # noqa: E402
from tern.weights.port import port_layer_weights  # noqa: E402

RULES = Path(__file__).resolve().parents[1] / "rules"
TABLES = load_tables(RULES)
MASKS = tomllib.loads((RULES / "structure" / "implicit_masks.toml").read_text())
SUPPORT = objects()
ATOL = 1e-5


def _keras_class(source: str):
    obj = keras
    for part in source.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def _masking(cls) -> tuple[bool, bool, bool]:
    """(call takes mask, compute_mask overridden, __init__ sets supports_masking = True)."""
    takes = "mask" in inspect.signature(cls.call).parameters
    computes = cls.compute_mask is not Layer.compute_mask
    supports = "supports_masking = True" in inspect.getsource(cls.__init__)
    return takes, computes, supports


@pytest.mark.parametrize("source", sorted({r.source for r in TABLES.layers.values()}))
def test_every_table_layer_is_classified_as_keras_treats_masks(source):
    """Listed as passing, reading or unknown exactly when Keras gives it masking support; the
    pass list only where the mask is passed on unread (no mask parameter, default compute_mask)."""
    takes, computes, supports = _masking(_keras_class(source))
    if source in MASKS["passes"]:
        assert supports and not takes and not computes
    elif source in MASKS["consumes"]:
        assert takes or source == "keras.layers.MultiHeadAttention"  # MHA reads query_mask/value_mask/key_mask
    elif source in MASKS["unknown"]:
        assert computes and not takes
    elif source != "keras.layers.Embedding":  # a mask source: implicit_masks.py follows mask_zero
        assert not (takes or computes or supports), f"{source} supports masking but the mask table does not list it"


def _port(record_source: str, keras_layer):
    record = TABLES.layers[record_source]
    return port_layer_weights(record, keras_layer)


def _flax_module(record_source: str, keras_kwargs: str):
    code = translate_source(
        f"import tensorflow as tf\n\nclass M(tf.keras.layers.Layer):\n"
        f"    def __init__(self):\n        super().__init__()\n"
        f"        self.rnn = tf.keras.layers.{record_source.rsplit('.', 1)[-1]}({keras_kwargs})\n\n"
        f"    def call(self, x, mask=None):\n        return self.rnn(x, mask=mask)\n",
        support_module="tern_rules.support",
    ).code
    assert "KerasMaskedRNN(" in code and "mask=mask" in code, code
    module = types.ModuleType("tern_masked_rnn_case")
    sys.modules[module.__name__] = module
    exec(compile(code, "<translation>", "exec"), module.__dict__)  # noqa: S102
    return module.M()


MASK = np.array([[1, 1, 0, 1, 0, 0], [0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]], bool)  # gaps, a masked start, none


@pytest.mark.parametrize("layer,kwargs", [
    ("keras.layers.LSTM", "4, return_sequences=True"),
    ("keras.layers.LSTM", "4"),
    ("keras.layers.GRU", "4, return_sequences=True"),
    ("keras.layers.GRU", "4, go_backwards=True"),
    ("keras.layers.SimpleRNN", "4, return_sequences=True"),
])
def test_masked_rnn_matches_keras_with_gaps_anywhere(layer, kwargs):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 6, 5)).astype("float32")
    keras_layer = eval(f"keras.layers.{layer.rsplit('.', 1)[-1]}({kwargs})")  # noqa: S307
    keras_layer(x)
    for v in keras_layer.weights:
        v.assign(rng.normal(scale=0.5, size=tuple(v.shape)).astype("float32"))
    expected = np.asarray(keras_layer(x, mask=MASK))
    module = _flax_module(layer, kwargs)
    params = module.init(jax.random.key(0), x, mask=MASK)
    ported = _port(layer, keras_layer)
    wrapped = "layers_0" in params["params"]["rnn"]  # return_sequences=False: nn.Sequential([rnn, last step])
    tree = {"params": {"rnn": {"layers_0": ported["params"]} if wrapped else ported["params"]}}
    assert jax.tree_util.tree_structure(tree) == jax.tree_util.tree_structure(dict(params))
    got = np.asarray(module.apply(tree, x, mask=MASK))
    np.testing.assert_allclose(got, expected, atol=ATOL, rtol=0)
    unmasked = np.asarray(module.apply(tree, x))
    np.testing.assert_allclose(unmasked, np.asarray(keras_layer(x)), atol=ATOL, rtol=0)
    assert not np.allclose(unmasked, expected, atol=1e-3)  # the mask matters on these inputs


@pytest.mark.parametrize("keepdims", [False, True])
def test_masked_mean_matches_keras_global_average_pooling(keepdims):
    x = np.random.default_rng(1).normal(size=(2, 5, 3)).astype("float32")
    x[0, 4] = np.inf  # a non-finite value under the mask must not leak
    mask = np.array([[1, 1, 0, 1, 0], [1, 1, 1, 1, 1]], "float32")
    expected = np.asarray(keras.layers.GlobalAveragePooling1D(keepdims=keepdims)(x, mask=mask))
    got = np.asarray(SUPPORT["keras_masked_mean"](x, mask, keepdims=keepdims))
    np.testing.assert_allclose(got, expected, atol=ATOL, rtol=0)
    assert np.isfinite(got).all()


def test_an_rnn_given_a_mask_where_tern_cannot_see_its_constructor_keeps_a_todo():
    code = translate_source(
        "import tensorflow as tf\n\n\ndef run(rnn, x, mask):\n    return rnn(x, mask=mask)\n\n\n"
        "def build():\n    return tf.keras.layers.LSTM(3)(tf.zeros((1, 2, 3)), mask=tf.ones((1, 2), tf.bool))\n"
    ).code
    assert "TODO(tern): keras.layers.LSTM call: call argument `mask`" in code
