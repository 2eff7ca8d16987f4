"""Keras' ``accuracy`` (the function behind ``keras.metrics.Accuracy``) in ``jax.numpy``.

1.0 where labels equal predictions exactly, after casting the labels to the predictions'
dtype and lining the two up by rank (``keras_same_rank``); float32.
Used through ``KerasMeanMetricWrapper`` by ``keras.metrics.Accuracy``. Translations import it from the package's generated support module.
"""

import jax

from .keras_same_rank import keras_same_rank

def keras_accuracy(y_true, y_pred):
    """``float32(y_true == y_pred)`` per entry."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true = jax.numpy.asarray(y_true).astype(y_pred.dtype)
    y_true, y_pred = keras_same_rank(y_true, y_pred)
    return (y_true == y_pred).astype(jax.numpy.float32)
