"""Keras' ``squeeze_or_expand_to_same_rank`` (keras/src/losses/loss.py) in ``jax.numpy``.

Keras lines up labels of shape ``(batch,)`` with predictions of shape ``(batch, 1)`` before
computing a loss; ``jax.numpy`` would broadcast them to ``(batch, batch)`` and silently
average the wrong thing. Translations import it from the package's generated support module (the loss
definitions that need it import it).
"""

import jax


def keras_same_rank(x1, x2, expand_rank_1=True):
    """When the ranks differ by one and the longer array ends in a 1, squeeze that axis
    (or, for a rank-1 partner, expand the shorter one), as Keras does."""
    x1, x2 = jax.numpy.asarray(x1), jax.numpy.asarray(x2)
    if x1.ndim == x2.ndim + 1 and x1.shape[-1] == 1:
        if x2.ndim == 1 and expand_rank_1:
            x2 = jax.numpy.expand_dims(x2, -1)
        else:
            x1 = jax.numpy.squeeze(x1, -1)
    if x2.ndim == x1.ndim + 1 and x2.shape[-1] == 1:
        if x1.ndim == 1 and expand_rank_1:
            x1 = jax.numpy.expand_dims(x1, -1)
        else:
            x2 = jax.numpy.squeeze(x2, -1)
    return x1, x2
