"""Keras' ``keras.metrics.binary_accuracy`` in ``jax.numpy``.

A prediction counts as 1 when it is strictly greater than ``threshold`` (0.5: a prediction
of exactly 0.5 is a 0), cast to the labels' dtype and compared with the labels for exact
equality (soft labels never match), per entry, float32, after Keras' rank alignment. Keras
compares the predictions as given: probabilities against 0.5, logits need ``threshold=0``.
Used by the function ``keras.metrics.binary_accuracy`` and, through
``KerasMeanMetricWrapper``, by ``keras.metrics.BinaryAccuracy``. Translations import it from the package's generated support module.
"""

import jax

from .keras_same_rank import keras_same_rank

def keras_binary_accuracy(y_true, y_pred, threshold=0.5):
    """``float32(y_true == (y_pred > threshold))`` per entry."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true = jax.numpy.asarray(y_true)
    y_true, y_pred = keras_same_rank(y_true, y_pred)
    y_pred = (y_pred > threshold).astype(y_true.dtype)
    return (y_true == y_pred).astype(jax.numpy.float32)
