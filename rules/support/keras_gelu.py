"""Keras' ``gelu`` as one named function (exact by default; ``jax.nn.gelu`` approximates).

Written where code compares an activation with it (``if self.activation ==
keras.activations.gelu``): ``functools.partial(jax.nn.gelu, approximate=False)``, the form
used elsewhere, is a new object wherever it is written, so such a comparison would never hold.
Translations import it from the package's generated support module.
"""

import jax


def keras_gelu(x, approximate=False):
    """``keras.activations.gelu``: exact unless ``approximate``."""
    return jax.nn.gelu(x, approximate=approximate)
