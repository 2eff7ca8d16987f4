"""Keras' ``ops.argmax`` (TensorFlow backend) in ``jax.numpy``.

Keras replaces float ``-0.0`` by ``-tiny`` before ``tf.argmax`` (keras/src/backend/
tensorflow/numpy.py), so ``-0.0`` loses against ``0.0``; ``jnp.argmax`` treats them as
equal and returns the first. Ties otherwise go to the first index on both sides. Used by
the accuracy metrics; translations import it from the package's generated support module.
"""

import jax


def keras_argmax(x, axis=-1):
    """Index of the largest entry along ``axis`` (``-0.0 < 0.0``, first index on ties)."""
    x = jax.numpy.asarray(x)
    if jax.numpy.issubdtype(x.dtype, jax.numpy.floating):
        x = jax.numpy.asarray(x, jax.numpy.promote_types(x.dtype, jax.numpy.float32))
        tiny = jax.numpy.finfo(x.dtype).tiny
        x = jax.numpy.where((x == 0) & jax.numpy.signbit(x), -tiny, x)
    return jax.numpy.argmax(x, axis=axis)
