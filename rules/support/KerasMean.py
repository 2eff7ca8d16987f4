"""``keras.metrics.Mean`` as a plain Python object holding NumPy float32 state.

A jitted JAX step is pure, so metric state lives outside it: the step returns its
per-batch values and the training loop feeds them to ``update_state`` on concrete arrays
(NumPy, JAX or Python numbers; a traced value inside ``jax.jit`` fails loudly, as it
should). The API is Keras': ``update_state(values, sample_weight=None)``, ``result()``,
``reset_state()`` (``reset_states()`` as in tf.keras 2), ``name``, and calling the object
updates it and returns the result.

Accumulation follows keras/src/metrics/reduction_metrics.py exactly: ``total`` and
``count`` are float32; each batch adds the sum of its per-sample (weighted) values
(``keras_samplewise_values``) and, as count, the sum of the per-sample weights, or the
number of samples, or 1 for a scalar. ``result()`` is ``total / count``, 0 before any
sample (``divide_no_nan``). Translations import it from the package's generated support module.
"""

import numpy

from .keras_divide_no_nan import keras_divide_no_nan
from .keras_metric_name import keras_metric_name
from .keras_samplewise_values import keras_samplewise_values

class KerasMean:
    """Keras' ``Mean``: the (weighted) mean of everything seen since the last reset."""

    def __init__(self, name="mean"):
        self.name = keras_metric_name(name, "mean")
        self.reset_state()

    def update_state(self, values, sample_weight=None):
        values, sample_weight = keras_samplewise_values(values, sample_weight, numpy.mean)
        self.total = numpy.float32(self.total + numpy.sum(values, dtype=numpy.float32))
        if sample_weight is not None:
            count = numpy.sum(sample_weight, dtype=numpy.float32)
        elif values.ndim >= 1:
            count = values.shape[0]
        else:
            count = 1
        self.count = numpy.float32(self.count + numpy.float32(count))

    def result(self):
        return keras_divide_no_nan(self.total, self.count)

    def reset_state(self):
        self.total = numpy.float32(0)
        self.count = numpy.float32(0)

    def reset_states(self):
        self.reset_state()

    def __call__(self, *args, **kwargs):
        self.update_state(*args, **kwargs)
        return self.result()
