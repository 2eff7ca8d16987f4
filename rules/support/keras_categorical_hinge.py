"""Keras' ``keras.losses.categorical_hinge`` per-sample loss in ``jax.numpy``.

``max(max((1 - y_true) * y_pred) - sum(y_true * y_pred) + 1, 0)`` over the last axis.
Used by the function ``keras.losses.categorical_hinge`` and, through ``keras_loss``, by the class
``keras.losses.CategoricalHinge``. Translations import it from the package's generated support module.
"""

import jax


def keras_categorical_hinge(y_true, y_pred):
    """``max(neg - pos + 1, 0)`` with ``pos = sum(y_true * y_pred)``, ``neg = max((1 - y_true) * y_pred)``."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true = jax.numpy.asarray(y_true).astype(y_pred.dtype)
    pos = jax.numpy.sum(y_true * y_pred, axis=-1)
    neg = jax.numpy.max((1.0 - y_true) * y_pred, axis=-1)
    return jax.numpy.maximum(neg - pos + 1.0, 0.0)
