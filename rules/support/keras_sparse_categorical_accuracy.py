"""Keras' ``keras.metrics.sparse_categorical_accuracy`` in ``jax.numpy``.

1.0 where the integer label equals the arg-max of the predictions over the last axis
(``keras_argmax``: first index on ties, ``-0.0`` below ``0.0``); labels of shape
``(..., 1)`` are squeezed, and so is a trailing axis of 1 in the result; float32 (labels
are compared as floats, as Keras casts them to the predictions' dtype). Used by the function
``keras.metrics.sparse_categorical_accuracy`` and, through ``KerasMeanMetricWrapper``, by
``keras.metrics.SparseCategoricalAccuracy``. Translations import it from the package's generated support module.
"""

import jax

from .keras_argmax import keras_argmax

def keras_sparse_categorical_accuracy(y_true, y_pred):
    """``float32(y_true == argmax(y_pred))`` over the last axis."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true = jax.numpy.asarray(y_true).astype(y_pred.dtype)
    shape = y_true.shape
    reshape = y_true.ndim == y_pred.ndim and y_true.shape[-1] == 1
    if reshape:
        y_true = jax.numpy.squeeze(y_true, -1)
    matches = (y_true == keras_argmax(y_pred, axis=-1).astype(y_true.dtype)).astype(jax.numpy.float32)
    if reshape:
        matches = matches.reshape(shape)
    if matches.ndim > 1 and matches.shape[-1] == 1:
        matches = jax.numpy.squeeze(matches, -1)
    return matches
