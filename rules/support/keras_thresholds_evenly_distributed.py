"""Keras' ``is_evenly_distributed_thresholds`` (keras/src/metrics/metrics_utils.py).

Whether thresholds are ``0, 1/(n-1), ..., 1`` (n >= 3, within ``np.allclose(atol=1e-7)``):
Keras then counts a batch with a bucketing shortcut (``keras_confusion_matrix_update``)
whose results differ from comparing with each threshold at exact boundaries and for
predictions outside [0, 1], so the translation must take the same path. Translations import it from the package's generated support module.
"""

import numpy


def keras_thresholds_evenly_distributed(thresholds):
    """True when Keras takes its evenly-spaced-thresholds path for ``thresholds``."""
    count = len(thresholds)
    if count < 3:
        return False
    even = numpy.arange(count, dtype=numpy.float32) / (count - 1)
    return bool(numpy.allclose(thresholds, even, atol=1e-7))
