"""Keras' ``keras.losses.mean_absolute_percentage_error`` per-sample loss in ``jax.numpy``.

The denominator ``|y_true|`` is floored at Keras' epsilon 1e-7; labels and predictions
are lined up by rank first.
Used by the function ``keras.losses.mean_absolute_percentage_error`` and, through ``keras_loss``, by the class
``keras.losses.MeanAbsolutePercentageError``. Translations import it from the package's generated support module.
"""

import jax

from .keras_same_rank import keras_same_rank

def keras_mean_absolute_percentage_error(y_true, y_pred):
    """``100 * mean(|(y_true - y_pred) / max(|y_true|, 1e-7)|, axis=-1)``."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true, y_pred = keras_same_rank(jax.numpy.asarray(y_true, y_pred.dtype), y_pred)
    diff = jax.numpy.abs((y_true - y_pred) / jax.numpy.maximum(jax.numpy.abs(y_true), 1e-7))
    return 100.0 * jax.numpy.mean(diff, axis=-1)
