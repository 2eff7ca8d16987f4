"""Keras' ``keras.metrics.sparse_top_k_categorical_accuracy`` in ``jax.numpy``.

1.0 where the integer label is among the ``k`` largest predictions (``keras_in_top_k``:
ties at the boundary count as in), float32, in the labels' shape (labels ``(n, 1)`` give
``(n, 1)``); predictions of rank > 2 are flattened to (samples, classes). With
``from_sorted_ids=True`` the predictions are class ids sorted by score and the label must be
among the first ``k``. Used by the function ``keras.metrics.sparse_top_k_categorical_accuracy``
and, through ``KerasMeanMetricWrapper``, by ``keras.metrics.SparseTopKCategoricalAccuracy``.
Translations import it from the package's generated support module.
"""

import jax

from .keras_in_top_k import keras_in_top_k


def keras_sparse_top_k_categorical_accuracy(y_true, y_pred, k=5, from_sorted_ids=False):
    """``float32(y_true in top_k(y_pred))`` per label."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true = jax.numpy.asarray(y_true).astype(y_pred.dtype if from_sorted_ids else jax.numpy.int32)
    shape = y_true.shape
    y_true = y_true.reshape(-1)
    y_pred = y_pred.reshape(-1, y_pred.shape[-1])
    if from_sorted_ids:
        matches = jax.numpy.any(y_true[:, None] == y_pred[:, :k], axis=1)
    else:
        matches = keras_in_top_k(y_true, y_pred, k)
    return matches.astype(jax.numpy.float32).reshape(shape)
