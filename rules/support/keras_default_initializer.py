"""What a Keras weight gets when its initializer is ``None``: ``glorot_uniform``, with Keras' fans.

``Conv2D(bias_initializer=None)`` passes ``None`` on to ``add_weight``, which draws a float
weight with ``glorot_uniform`` (tf_keras and Keras 3 alike), biases included. Keras computes
the fans of a 1-D shape as ``(n, n)``; Flax's initializers need two dimensions, so a 1-D
weight is one row of an ``(n, n)`` draw: the same distribution. Translations import it
from the package's generated support module (an initializer table maps ``None`` to it).
"""

import flax.linen
import jax


def keras_default_initializer(key, shape, dtype=jax.numpy.float32):
    """``glorot_uniform`` as Keras applies it to a weight of any rank."""
    if len(shape) == 1:
        return flax.linen.initializers.glorot_uniform()(key, (shape[0], shape[0]), dtype)[0]
    return flax.linen.initializers.glorot_uniform()(key, shape, dtype)
