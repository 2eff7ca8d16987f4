"""Keras' ``keras.losses.squared_hinge`` per-sample loss in ``jax.numpy``.

As the hinge loss (0/1 labels mapped to -1/1), squared before the mean over the last
axis.
Used by the function ``keras.losses.squared_hinge`` and, through ``keras_loss``, by the class
``keras.losses.SquaredHinge``. Translations import it from the package's generated support module.
"""

import jax


def keras_squared_hinge(y_true, y_pred):
    """``mean(max(1 - y_true * y_pred, 0) ** 2, axis=-1)`` with 0/1 labels mapped to -1/1."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true = jax.numpy.asarray(y_true).astype(y_pred.dtype)
    binary = jax.numpy.all((y_true == 0) | (y_true == 1))
    y_true = jax.numpy.where(binary, 2.0 * y_true - 1.0, y_true)
    return jax.numpy.mean(jax.numpy.square(jax.numpy.maximum(1.0 - y_true * y_pred, 0.0)), axis=-1)
