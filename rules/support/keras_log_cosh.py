"""Keras' ``keras.losses.log_cosh`` per-sample loss in ``jax.numpy`` (optax.log_cosh).

``optax.log_cosh`` is ``log(cosh(y_pred - y_true))`` computed stably, as Keras'
``x + softplus(-2x) - log 2``; Keras averages it over the last axis after lining labels
and predictions up by rank.
Used by the function ``keras.losses.log_cosh`` and, through ``keras_loss``, by the class
``keras.losses.LogCosh``. Translations import it from the package's generated support module.
"""

import jax
import optax

from .keras_same_rank import keras_same_rank

def keras_log_cosh(y_true, y_pred):
    """``mean(log(cosh(y_pred - y_true)), axis=-1)``."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true, y_pred = keras_same_rank(jax.numpy.asarray(y_true, y_pred.dtype), y_pred)
    return jax.numpy.mean(optax.log_cosh(y_pred, y_true), axis=-1)
