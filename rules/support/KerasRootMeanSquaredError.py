"""``keras.metrics.RootMeanSquaredError`` as a plain Python object holding NumPy float32 state.

Keras (keras/src/metrics/regression_metrics.py) lines labels and predictions up by rank,
feeds the squared errors to ``Mean`` (so a sample's several outputs are averaged, then
weighted) and returns the square root of the mean: ``sqrt(total / count)``, not the mean of
per-batch roots. The mean is a held ``KerasMean`` (every support file must run on its own).
Translations import it from the package's generated support module.
"""

import numpy

from .KerasMean import KerasMean
from .keras_metric_name import keras_metric_name
from .keras_same_rank import keras_same_rank


class KerasRootMeanSquaredError:
    """``sqrt`` of the running (weighted) mean of ``(y_pred - y_true) ** 2``."""

    def __init__(self, name="root_mean_squared_error"):
        self.name = keras_metric_name(name, "root_mean_squared_error")
        self.mean = KerasMean(name=self.name)

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = numpy.asarray(y_true).astype(numpy.float32)
        y_pred = numpy.asarray(y_pred).astype(numpy.float32)
        y_true, y_pred = (numpy.asarray(v) for v in keras_same_rank(y_true, y_pred))
        self.mean.update_state(numpy.square(y_pred - y_true), sample_weight=sample_weight)

    def result(self):
        return numpy.sqrt(self.mean.result())

    def reset_state(self):
        self.mean.reset_state()

    def reset_states(self):
        self.reset_state()

    def __call__(self, *args, **kwargs):
        self.update_state(*args, **kwargs)
        return self.result()
