"""The metric Keras' ``compile`` makes of the string ``"accuracy"`` (or ``"acc"``).

Keras picks it from the shapes of the first batch (keras/src/trainers/compile_utils.py,
``get_metric``): binary accuracy when the predictions' last axis is 1, sparse categorical
accuracy when the labels have a lower rank than the predictions (or a last axis of 1
against more than one prediction), categorical accuracy otherwise; the metric keeps the
string as its name. The same choice, made at the first ``update_state``. Translations import it from the package's generated support module.
"""

import numpy

from .KerasMeanMetricWrapper import KerasMeanMetricWrapper
from .keras_binary_accuracy import keras_binary_accuracy
from .keras_categorical_accuracy import keras_categorical_accuracy
from .keras_sparse_categorical_accuracy import keras_sparse_categorical_accuracy

class KerasAutoAccuracy:
    """``"accuracy"`` in ``compile(metrics=...)``: binary, sparse categorical or categorical accuracy by shape."""

    def __init__(self, name="accuracy"):
        self.name = name
        self.metric = None

    def _resolve(self, y_true, y_pred):
        true_shape, pred_shape = numpy.shape(y_true), numpy.shape(y_pred)
        is_binary = pred_shape[-1] == 1
        is_sparse = len(true_shape) < len(pred_shape) or (true_shape[-1] == 1 and pred_shape[-1] > 1)
        if is_binary:
            fn = keras_binary_accuracy
        elif is_sparse:
            fn = keras_sparse_categorical_accuracy
        else:
            fn = keras_categorical_accuracy
        self.metric = KerasMeanMetricWrapper(fn, name=self.name)

    def update_state(self, y_true, y_pred, sample_weight=None):
        if self.metric is None:
            self._resolve(y_true, y_pred)
        self.metric.update_state(y_true, y_pred, sample_weight=sample_weight)

    def result(self):
        return numpy.float32(0) if self.metric is None else self.metric.result()

    def reset_state(self):
        if self.metric is not None:
            self.metric.reset_state()

    def reset_states(self):
        self.reset_state()

    def __call__(self, *args, **kwargs):
        self.update_state(*args, **kwargs)
        return self.result()
