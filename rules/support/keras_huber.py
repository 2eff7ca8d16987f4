"""Keras' ``keras.losses.huber`` per-sample loss in ``jax.numpy`` (optax.huber_loss).

``optax.huber_loss`` is Keras' element-wise formula (``0.5 * e ** 2`` within ``delta``,
``delta * |e| - 0.5 * delta ** 2`` beyond); Keras averages it over the last axis after
lining labels and predictions up by rank.
Used by the function ``keras.losses.huber`` and, through ``keras_loss``, by the class
``keras.losses.Huber``. Translations import it from the package's generated support module.
"""

import jax
import optax

from .keras_same_rank import keras_same_rank

def keras_huber(y_true, y_pred, delta=1.0):
    """``mean(huber(y_pred - y_true, delta), axis=-1)``."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true, y_pred = keras_same_rank(jax.numpy.asarray(y_true, y_pred.dtype), y_pred)
    return jax.numpy.mean(optax.huber_loss(y_pred, y_true, delta=delta), axis=-1)
