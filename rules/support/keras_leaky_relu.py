"""Keras' ``leaky_relu`` as one named function (slope 0.2 by default; ``jax.nn.leaky_relu`` 0.01).

Written where code compares an activation with it: ``functools.partial(jax.nn.leaky_relu,
negative_slope=0.2)``, the form used elsewhere, is a new object wherever it is written, so
such a comparison would never hold. Translations import it from the package's generated
support module.
"""

import jax


def keras_leaky_relu(x, negative_slope=0.2):
    """``keras.activations.leaky_relu`` / ``tf.nn.leaky_relu`` with Keras' default slope."""
    return jax.nn.leaky_relu(x, negative_slope)
