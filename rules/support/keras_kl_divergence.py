"""Keras' ``keras.losses.kl_divergence`` per-sample loss in ``jax.numpy``.

Keras clips both distributions to ``[1e-7, 1]`` before ``y_true * log(y_true / y_pred)``
and sums over the last axis; ``optax.kl_divergence`` takes log-predictions and does not
clip, so zero labels and zero predictions give different values there.
Used by the function ``keras.losses.kl_divergence`` and, through ``keras_loss``, by the class
``keras.losses.KLDivergence``. Translations import it from the package's generated support module.
"""

import jax


def keras_kl_divergence(y_true, y_pred):
    """``sum(t * log(t / p), axis=-1)`` with ``t, p`` clipped to ``[1e-7, 1]``."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true = jax.numpy.clip(jax.numpy.asarray(y_true, y_pred.dtype), 1e-7, 1)
    y_pred = jax.numpy.clip(y_pred, 1e-7, 1)
    return jax.numpy.sum(y_true * jax.numpy.log(y_true / y_pred), axis=-1)
