"""``tf.debugging.assert_equal`` run eagerly: raise when any element of ``x`` differs from ``y``.

TF checks at run time and raises InvalidArgumentError (here ``TFInvalidArgumentError``, which
is TypeError: what jax.numpy raises for the shape errors TF reports under that class). The
check reads concrete values: shapes (``x.shape[0]``) and eager arrays pass through jit; a value
traced under jit cannot be tested and raises JAX's concretization error, never a silent pass.
"""

import numpy

from .TFInvalidArgumentError import TFInvalidArgumentError


def tf_assert_equal(x, y, message=None):
    """None when ``x == y`` everywhere (broadcast), else TFInvalidArgumentError."""
    if not numpy.all(numpy.equal(numpy.asarray(x), numpy.asarray(y))):
        raise TFInvalidArgumentError(f"{message + ': ' if message else ''}Condition x == y did not hold: x = {x!r}, y = {y!r}")
    return None
