"""A user's keras.losses.Loss subclass, translated onto KerasLoss (rules/support), against Keras.

The subclass's per-sample losses are reduced as Keras' Loss.__call__ reduces them: every
reduction, with and without sample weights (float32, rtol = atol = 1e-6).
"""

from __future__ import annotations

import os
import sys
import types

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tern.engine.support_module import objects  # noqa: E402
from tern.engine.translate import translate_source  # noqa: E402

SOURCE = '''import tensorflow as tf
from tensorflow import keras


class Scaled(keras.losses.Loss):
    def __init__(self, scale=2.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale

    def call(self, y_true, y_pred):
        return tf.reduce_mean(tf.square(y_true - y_pred), axis=-1) * self.scale
'''


def _module(code: str, name: str, extra: dict) -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module
    module.__dict__.update(extra)
    exec(compile(code, f"<{name}>", "exec"), module.__dict__)  # noqa: S102
    return module


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "sum", "none", "mean_with_sample_weight"])
@pytest.mark.parametrize("weighted", [False, True])
def test_a_loss_subclass_reduces_as_keras_does(reduction, weighted):
    keras_side = _module(SOURCE, "tern_loss_keras", {})
    code = translate_source(SOURCE, support_module="tern_rules.support").code
    assert "class Scaled(KerasLoss)" in code and "tensorflow" not in code
    jax_side = _module(code, "tern_loss_jax", objects())
    rng = np.random.default_rng(0)
    y_true, y_pred = rng.normal(size=(4, 3)).astype("float32"), rng.normal(size=(4, 3)).astype("float32")
    weight = rng.uniform(size=(4,)).astype("float32") if weighted else None
    want = np.asarray(keras_side.Scaled(scale=3.0, reduction=reduction)(y_true, y_pred, sample_weight=weight))
    got = np.asarray(jax_side.Scaled(scale=3.0, reduction=reduction)(y_true, y_pred, sample_weight=weight))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


LIST_SOURCE = SOURCE.replace("tf.square(y_true - y_pred)", "tf.math.squared_difference(y_true, y_pred)")


def test_a_loss_subclass_takes_python_lists_as_keras_does():
    keras_side = _module(LIST_SOURCE, "tern_loss_keras_lists", {})
    jax_side = _module(translate_source(LIST_SOURCE, support_module="tern_rules.support").code, "tern_loss_jax_lists", objects())
    y_true, y_pred = [[1.0, 2.0], [3.0, 4.0]], [[0.5, 2.5], [1.0, 4.0]]
    want = np.asarray(keras_side.Scaled()(y_true, y_pred))
    np.testing.assert_allclose(np.asarray(jax_side.Scaled()(y_true, y_pred)), want, rtol=1e-6)
