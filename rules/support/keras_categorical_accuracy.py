"""Keras' ``keras.metrics.categorical_accuracy`` in ``jax.numpy``.

1.0 where the arg-max of the one-hot (or soft) labels equals the arg-max of the predictions
over the last axis (``keras_argmax``: first index on ties, ``-0.0`` below ``0.0``), float32,
one value per sample. Used by the function ``keras.metrics.categorical_accuracy`` and,
through ``KerasMeanMetricWrapper``, by ``keras.metrics.CategoricalAccuracy``. Translations import it from the package's generated support module.
"""

import jax

from .keras_argmax import keras_argmax

def keras_categorical_accuracy(y_true, y_pred):
    """``float32(argmax(y_true) == argmax(y_pred))`` over the last axis."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true = keras_argmax(y_true, axis=-1).astype(y_pred.dtype)
    shape = y_true.shape
    reshape = y_true.ndim == y_pred.ndim
    if reshape:
        y_true = jax.numpy.squeeze(y_true, -1)
    matches = (y_true == keras_argmax(y_pred, axis=-1).astype(y_true.dtype)).astype(jax.numpy.float32)
    return matches.reshape(shape) if reshape else matches
