"""``tf.math.divide_no_nan`` in NumPy float32, as Keras metrics compute their results.

``x / y`` where ``y != 0`` and 0 where ``y == 0`` (even for 0 / 0): a metric that has seen no
samples reports 0, not NaN. Used by the metric classes in rules/support; translations import it from the package's generated support module.
"""

import numpy


def keras_divide_no_nan(x, y):
    """``x / y`` elementwise in float32, 0 where ``y`` is 0."""
    x = numpy.asarray(x, numpy.float32)
    y = numpy.asarray(y, numpy.float32)
    zero = y == 0
    return numpy.where(zero, numpy.float32(0), x / numpy.where(zero, numpy.float32(1), y)).astype(numpy.float32)
