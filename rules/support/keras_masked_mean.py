"""Keras' ``GlobalAveragePooling1D`` called with a mask: the mean over the unmasked steps only.

Keras (keras/src/layers/pooling/global_average_pooling1d.py) casts the mask to bool, zeroes
the masked steps with ``where`` (so a non-finite value there does not leak) and divides by
the number of unmasked steps. A translation calls it where Keras would have handed the
pooling layer a mask; it imports it from the package's generated support module.
"""

import jax


def keras_masked_mean(inputs, mask, keepdims=False):
    """Mean of ``inputs`` (batch, steps, features) over the steps where ``mask`` (batch, steps) is set."""
    keep = jax.numpy.asarray(mask, bool)[:, :, None]
    total = jax.numpy.sum(jax.numpy.where(keep, inputs, 0), axis=1, keepdims=keepdims)
    return total / jax.numpy.sum(keep.astype(inputs.dtype), axis=1, keepdims=keepdims)
