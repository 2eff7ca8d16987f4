"""Keras' ``keras.losses.binary_crossentropy`` per-sample loss in ``jax.numpy`` (optax for logits).

Keras smooths labels towards 0.5 (``y * (1 - s) + 0.5 * s``), and for probabilities clips
them to ``[1e-7, 1 - 1e-7]`` before the logs (optax has no probability form and does not
clip); the element-wise losses are averaged over ``axis``. Keras also uses the logits behind
a ``sigmoid`` activation's output when it can find them; a JAX array carries none, so
probabilities are always clipped (the values agree except for probabilities within 1e-7 of
0 or 1).
Used by the function ``keras.losses.binary_crossentropy`` and, through ``keras_loss``, by the class
``keras.losses.BinaryCrossentropy``. Translations import it from the package's generated support module.
"""

import jax
import optax


def keras_binary_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    """Mean over ``axis`` of the element-wise binary cross-entropy."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true = jax.numpy.asarray(y_true).astype(y_pred.dtype)
    if label_smoothing:
        y_true = y_true * (1.0 - label_smoothing) + 0.5 * label_smoothing
    if from_logits:
        losses = optax.sigmoid_binary_cross_entropy(y_pred, y_true)
    else:
        p = jax.numpy.clip(y_pred, 1e-7, 1.0 - 1e-7)
        losses = -(y_true * jax.numpy.log(p) + (1 - y_true) * jax.numpy.log(1 - p))
    return jax.numpy.mean(losses, axis=axis)
