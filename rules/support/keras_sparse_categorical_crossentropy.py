"""Keras' ``keras.losses.sparse_categorical_crossentropy`` per-sample loss in ``jax.numpy`` (optax for logits).

Labels of shape ``(..., 1)`` are squeezed; for probabilities Keras (TensorFlow backend)
takes ``log(clip(p, 1e-7, 1 - 1e-7))`` as logits of a softmax cross-entropy, so the clipped
probabilities are renormalized too. ``ignore_class`` entries get label 0 and a loss of 0
(``keras_loss`` then leaves them out of the mean). Labels outside ``[0, classes)`` raise in
TensorFlow on CPU; optax returns a meaningless value for them.
Used by the function ``keras.losses.sparse_categorical_crossentropy`` and, through ``keras_loss``, by the class
``keras.losses.SparseCategoricalCrossentropy``. Translations import it from the package's generated support module.
"""

import jax
import optax


def keras_sparse_categorical_crossentropy(y_true, y_pred, from_logits=False, ignore_class=None, axis=-1):
    """Cross-entropy between integer labels and predictions along ``axis``."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true = jax.numpy.asarray(y_true)
    if y_true.ndim == y_pred.ndim and y_true.shape[axis] == 1:
        y_true = jax.numpy.squeeze(y_true, axis)
    valid = None
    if ignore_class is not None:
        valid = y_true != ignore_class
        y_true = jax.numpy.where(valid, y_true, 0)
        y_pred = jax.numpy.where(jax.numpy.expand_dims(valid, axis), y_pred, 0)
    logits = y_pred if from_logits else jax.numpy.log(jax.numpy.clip(y_pred, 1e-7, 1.0 - 1e-7))
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, y_true.astype(jax.numpy.int32), axis=axis)
    if valid is not None:
        losses = jax.numpy.where(valid, losses, 0.0)
    return losses
