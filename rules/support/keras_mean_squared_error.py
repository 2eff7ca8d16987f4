"""Keras' ``keras.losses.mean_squared_error`` per-sample loss in ``jax.numpy``.

Labels and predictions are lined up by rank first (``keras_same_rank``); the loss is the
mean over the last axis.
Used by the function ``keras.losses.mean_squared_error`` and, through ``keras_loss``, by the class
``keras.losses.MeanSquaredError``. Translations import it from the package's generated support module.
"""

import jax

from .keras_same_rank import keras_same_rank

def keras_mean_squared_error(y_true, y_pred):
    """``mean((y_true - y_pred) ** 2, axis=-1)``."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true, y_pred = keras_same_rank(jax.numpy.asarray(y_true, y_pred.dtype), y_pred)
    return jax.numpy.mean(jax.numpy.square(y_true - y_pred), axis=-1)
