"""Keras' ``keras.metrics.top_k_categorical_accuracy`` in ``jax.numpy``.

1.0 where the arg-max of the one-hot labels is among the ``k`` largest predictions
(``keras_in_top_k``: ties at the boundary count as in), float32, one value per sample;
predictions of rank > 2 are flattened to (samples, classes) and the result takes the labels'
shape. Used by the function ``keras.metrics.top_k_categorical_accuracy`` and, through
``KerasMeanMetricWrapper``, by ``keras.metrics.TopKCategoricalAccuracy``. Translations import it from the package's generated support module.
"""

import jax

from .keras_argmax import keras_argmax
from .keras_in_top_k import keras_in_top_k

def keras_top_k_categorical_accuracy(y_true, y_pred, k=5):
    """``float32(argmax(y_true) in top_k(y_pred))`` per sample."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true = keras_argmax(jax.numpy.asarray(y_true).astype(y_pred.dtype), axis=-1)
    shape = y_true.shape
    matches = keras_in_top_k(y_true.reshape(-1), y_pred.reshape(-1, y_pred.shape[-1]), k)
    return matches.astype(jax.numpy.float32).reshape(shape)
