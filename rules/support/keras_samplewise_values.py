"""Keras' ``reduce_to_samplewise_values`` (keras/src/metrics/reduction_metrics.py) in NumPy float32.

How ``keras.metrics.Mean`` and ``Sum`` weigh a batch: values and sample weights are lined up
by rank (``keras_same_rank``); values with more axes than the weights are first reduced over
the extra axes; the weights are broadcast to the values and multiplied in, and weights with
more than one axis are reduced over their trailing axes; finally every value is reduced to
one per sample. ``reduce_fn`` is ``numpy.mean`` for ``Mean``, ``numpy.sum`` for ``Sum``. A
Keras mask carried by the values has no JAX counterpart: pass it as ``sample_weight``.
Translations import it from the package's generated support module.
"""

import numpy

from .keras_same_rank import keras_same_rank


def keras_samplewise_values(values, sample_weight, reduce_fn):
    """Per-sample float32 ``values`` (weighted) and the matching per-sample weights (or None)."""
    values = numpy.asarray(values).astype(numpy.float32)
    if sample_weight is not None:
        sample_weight = numpy.asarray(sample_weight).astype(numpy.float32)
        values, sample_weight = (numpy.asarray(v) for v in keras_same_rank(values, sample_weight))
        weight_ndim, values_ndim = sample_weight.ndim, values.ndim
        if values_ndim > weight_ndim:
            values = reduce_fn(values, axis=tuple(range(weight_ndim, values_ndim)))
        sample_weight = numpy.broadcast_to(sample_weight, values.shape)
        values = values * sample_weight
        if weight_ndim > 1:
            sample_weight = reduce_fn(sample_weight, axis=tuple(range(1, weight_ndim)))
    if values.ndim > 1:
        values = reduce_fn(values, axis=tuple(range(1, values.ndim)))
    return values, sample_weight
