"""Keras' ``keras.losses.cosine_similarity`` per-sample loss in ``jax.numpy``.

Keras returns the NEGATIVE cosine similarity (a loss to minimize), normalizing each side
as ``x * min(rsqrt(sum(x ** 2)), 1 / 1e-7)`` along ``axis``; ``optax.cosine_similarity``
returns the positive similarity with a different guard against zero vectors.
Used by the function ``keras.losses.cosine_similarity`` and, through ``keras_loss``, by the class
``keras.losses.CosineSimilarity``. Translations import it from the package's generated support module.
"""

import jax

from .keras_same_rank import keras_same_rank

def keras_cosine_similarity(y_true, y_pred, axis=-1):
    """``-sum(normalize(y_true) * normalize(y_pred), axis)``."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true, y_pred = keras_same_rank(jax.numpy.asarray(y_true, y_pred.dtype), y_pred)

    def normalize(x):
        inverse_norm = jax.lax.rsqrt(jax.numpy.sum(jax.numpy.square(x), axis=axis, keepdims=True))
        return x * jax.numpy.minimum(inverse_norm, 1.0 / 1e-7)

    return -jax.numpy.sum(normalize(y_true) * normalize(y_pred), axis=axis)
