"""Keras' ``keras.losses.categorical_crossentropy`` per-sample loss in ``jax.numpy`` (optax for logits).

Keras smooths one-hot labels by the size of the LAST axis (``y * (1 - s) + s / classes``),
and for probabilities renormalizes them along ``axis`` and clips them to
``[1e-7, 1 - 1e-7]`` before the log (optax has no probability form). As for the binary
loss, a ``softmax`` output's hidden logits are not available in JAX.
Used by the function ``keras.losses.categorical_crossentropy`` and, through ``keras_loss``, by the class
``keras.losses.CategoricalCrossentropy``. Translations import it from the package's generated support module.
"""

import jax
import optax


def keras_categorical_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    """Cross-entropy along ``axis`` between one-hot (or soft) labels and predictions."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true = jax.numpy.asarray(y_true).astype(y_pred.dtype)
    if label_smoothing:
        y_true = y_true * (1.0 - label_smoothing) + label_smoothing / y_true.shape[-1]
    if from_logits:
        return optax.softmax_cross_entropy(y_pred, y_true, axis=axis)
    output = y_pred / jax.numpy.sum(y_pred, axis=axis, keepdims=True)
    output = jax.numpy.clip(output, 1e-7, 1.0 - 1e-7)
    return -jax.numpy.sum(y_true * jax.numpy.log(output), axis=axis)
