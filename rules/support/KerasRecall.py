"""``keras.metrics.Recall`` as a plain Python object holding NumPy float32 state.

State outside jitted code, Keras' API (see ``KerasMean``). As keras/src/metrics/
confusion_metrics.py: float32 true positive and false negative counts per threshold,
updated by ``keras_confusion_matrix_update`` (thresholds, ``top_k`` and ``class_id`` as
Keras reads them, see ``keras_metric_thresholds``); ``result()`` is ``tp / (tp + fn)`` (0
when no label was positive), a scalar for one threshold, else one value per threshold.
Translations import it from the package's generated support module.
"""

import numpy

from .keras_confusion_matrix_update import keras_confusion_matrix_update
from .keras_divide_no_nan import keras_divide_no_nan
from .keras_metric_name import keras_metric_name
from .keras_metric_thresholds import keras_metric_thresholds


class KerasRecall:
    """Keras' ``Recall``: the fraction of positives that are predicted positive."""

    def __init__(self, thresholds=None, top_k=None, class_id=None, name=None):
        self.name = keras_metric_name(name, "recall")
        self.init_thresholds = thresholds
        self.top_k = top_k
        self.class_id = class_id
        self.thresholds, self._evenly = keras_metric_thresholds(thresholds, top_k)
        self.reset_state()

    def update_state(self, y_true, y_pred, sample_weight=None):
        counts = keras_confusion_matrix_update(
            y_true, y_pred, self.thresholds, evenly=self._evenly, top_k=self.top_k,
            class_id=self.class_id, sample_weight=sample_weight,
        )
        self.true_positives = (self.true_positives + counts["tp"]).astype(numpy.float32)
        self.false_negatives = (self.false_negatives + counts["fn"]).astype(numpy.float32)

    def result(self):
        result = keras_divide_no_nan(self.true_positives, self.true_positives + self.false_negatives)
        return result[0] if len(self.thresholds) == 1 else result

    def reset_state(self):
        self.true_positives = numpy.zeros(len(self.thresholds), numpy.float32)
        self.false_negatives = numpy.zeros(len(self.thresholds), numpy.float32)

    def reset_states(self):
        self.reset_state()

    def __call__(self, *args, **kwargs):
        self.update_state(*args, **kwargs)
        return self.result()
