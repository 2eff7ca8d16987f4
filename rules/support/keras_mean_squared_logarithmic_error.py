"""Keras' ``keras.losses.mean_squared_logarithmic_error`` per-sample loss in ``jax.numpy``.

Both sides are floored at Keras' epsilon 1e-7 before ``log(x + 1)``; labels and
predictions are lined up by rank first.
Used by the function ``keras.losses.mean_squared_logarithmic_error`` and, through ``keras_loss``, by the class
``keras.losses.MeanSquaredLogarithmicError``. Translations import it from the package's generated support module.
"""

import jax

from .keras_same_rank import keras_same_rank

def keras_mean_squared_logarithmic_error(y_true, y_pred):
    """``mean((log(max(y_pred, 1e-7) + 1) - log(max(y_true, 1e-7) + 1)) ** 2, axis=-1)``."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true, y_pred = keras_same_rank(jax.numpy.asarray(y_true, y_pred.dtype), y_pred)
    first = jax.numpy.log(jax.numpy.maximum(y_pred, 1e-7) + 1.0)
    second = jax.numpy.log(jax.numpy.maximum(y_true, 1e-7) + 1.0)
    return jax.numpy.mean(jax.numpy.square(first - second), axis=-1)
