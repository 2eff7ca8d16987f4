"""``keras.metrics.Sum`` as a plain Python object holding NumPy float32 state.

As ``KerasMean`` (state outside jitted code, Keras' API), following
keras/src/metrics/reduction_metrics.py: a float32 ``total`` to which each batch adds the
sum of its per-sample values, weighted (``keras_samplewise_values`` with ``numpy.sum``: a
sample's several values are summed, not averaged). Translations import it from the package's generated support module.
"""

import numpy

from .keras_metric_name import keras_metric_name
from .keras_samplewise_values import keras_samplewise_values

class KerasSum:
    """Keras' ``Sum``: the (weighted) sum of everything seen since the last reset."""

    def __init__(self, name="sum"):
        self.name = keras_metric_name(name, "sum")
        self.reset_state()

    def update_state(self, values, sample_weight=None):
        values, _ = keras_samplewise_values(values, sample_weight, numpy.sum)
        self.total = numpy.float32(self.total + numpy.sum(values, dtype=numpy.float32))

    def result(self):
        return numpy.asarray(self.total, numpy.float32)

    def reset_state(self):
        self.total = numpy.float32(0)

    def reset_states(self):
        self.reset_state()

    def __call__(self, *args, **kwargs):
        self.update_state(*args, **kwargs)
        return self.result()
