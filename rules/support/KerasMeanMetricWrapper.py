"""``keras.metrics.MeanMetricWrapper`` (and the metrics built on it) over a per-sample function.

``update_state(y_true, y_pred, sample_weight=None)`` computes ``fn(y_true, y_pred, **kwargs)``
(a ``jax.numpy`` function, e.g. ``keras_binary_accuracy``: it may also run inside jitted
code) and feeds the per-sample values to a ``KerasMean``: Keras' ``Accuracy``,
``BinaryAccuracy``, ``MeanSquaredError``, ... are exactly this
(keras/src/metrics/accuracy_metrics.py, regression_metrics.py), with their own default
names. The mean is held, not inherited: every support file must run on its own.
Translations import it from the package's generated support module.
"""

from .KerasMean import KerasMean
from .keras_metric_name import keras_metric_name


class KerasMeanMetricWrapper:
    """The running (weighted) mean of ``fn(y_true, y_pred, **kwargs)``."""

    def __init__(self, fn, name=None, **kwargs):
        self.name = keras_metric_name(name, "mean_metric_wrapper")
        self.fn = fn
        self.fn_kwargs = kwargs
        self.mean = KerasMean(name=self.name)

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.mean.update_state(self.fn(y_true, y_pred, **self.fn_kwargs), sample_weight=sample_weight)

    def result(self):
        return self.mean.result()

    def reset_state(self):
        self.mean.reset_state()

    def reset_states(self):
        self.reset_state()

    def __call__(self, *args, **kwargs):
        self.update_state(*args, **kwargs)
        return self.result()
