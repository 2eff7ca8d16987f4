"""``keras.metrics.AUC`` as a plain Python object holding NumPy float32 state.

State outside jitted code, Keras' API (see ``KerasMean``). Keras' algorithm
(keras/src/metrics/confusion_metrics.py), not an exact rank statistic: float32 confusion
counts at ``num_thresholds`` thresholds (by default ``i / (n - 1)`` for the inner ones and
-1e-7 / 1 + 1e-7 at the ends; given ``thresholds`` are sorted and framed the same way),
updated by ``keras_confusion_matrix_update``, then a Riemann sum over the curve:

* ``curve="ROC"``: x = false positive rate, y = recall; ``"PR"``: x = recall,
  y = precision; ``"PRGAIN"``: precision and recall gains (0 true positives give a recall
  gain of 0 and a precision gain of 1, recall gains clipped at 0);
* ``summation_method="interpolation"`` averages neighbouring heights, ``"minoring"`` /
  ``"majoring"`` take their minimum / maximum; PR with interpolation is Davis & Goadrich's
  interpolation (``interpolate_pr_auc``), as in Keras.

``multi_label=True`` keeps one curve per label (last axis of ``y_pred``, built at the first
update unless ``num_labels`` is given) and averages the label AUCs (weighted by
``label_weights`` if given); otherwise ``label_weights`` weigh the entries.
``from_logits=True`` applies a sigmoid first, correctly rounded to float32 (TensorFlow's
float32 sigmoid is off by an ulp for about half of all inputs, which moves a prediction to
another bucket only when ``p * (n - 1)`` is within an ulp of an integer). Translations import it from the package's generated support module.
"""

import numpy

from .keras_confusion_matrix_update import keras_confusion_matrix_update
from .keras_divide_no_nan import keras_divide_no_nan
from .keras_metric_name import keras_metric_name
from .keras_thresholds_evenly_distributed import keras_thresholds_evenly_distributed

class KerasAUC:
    """Keras' ``AUC``: area under the ROC or PR curve, approximated over fixed thresholds."""

    def __init__(
        self, num_thresholds=200, curve="ROC", summation_method="interpolation", name=None,
        thresholds=None, multi_label=False, num_labels=None, label_weights=None, from_logits=False,
    ):
        curves = {"roc": "ROC", "ROC": "ROC", "pr": "PR", "PR": "PR", "prgain": "PRGAIN", "PRGAIN": "PRGAIN"}
        methods = {
            "interpolation": "interpolation", "Interpolation": "interpolation",
            "majoring": "majoring", "Majoring": "majoring", "minoring": "minoring", "Minoring": "minoring",
        }
        if curve not in curves:
            raise ValueError(f'Invalid AUC curve value: "{curve}". Expected values are ["PR", "ROC", "PRGAIN"]')
        if summation_method not in methods:
            raise ValueError(f'Invalid AUC summation method value: "{summation_method}". Expected values are ["interpolation", "majoring", "minoring"]')
        if thresholds is not None:
            self.num_thresholds = len(thresholds) + 2
            thresholds = sorted(thresholds)
            self._evenly = keras_thresholds_evenly_distributed([0.0] + thresholds + [1.0])
        else:
            if num_thresholds <= 1:
                raise ValueError(f"Argument `num_thresholds` must be an integer > 1. Received: num_thresholds={num_thresholds}")
            self.num_thresholds = num_thresholds
            thresholds = [(i + 1) * 1.0 / (num_thresholds - 1) for i in range(num_thresholds - 2)]
            self._evenly = True
        self._thresholds = numpy.array([0.0 - 1e-7] + thresholds + [1.0 + 1e-7])
        self.curve = curves[curve]
        self.summation_method = methods[summation_method]
        self.name = keras_metric_name(name, "auc")
        self.multi_label = multi_label
        self.num_labels = num_labels
        self.label_weights = None if label_weights is None else numpy.asarray(label_weights, numpy.float32)
        self.from_logits = from_logits
        self._shape = None
        if not multi_label:
            if num_labels:
                raise ValueError("`num_labels` is needed only when `multi_label` is True.")
            self._shape = (self.num_thresholds,)
        elif num_labels:
            self._shape = (self.num_thresholds, num_labels)
        self.reset_state()

    @property
    def thresholds(self):
        return list(self._thresholds)

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = numpy.asarray(y_pred).astype(numpy.float32)
        if self._shape is None:
            if y_pred.ndim != 2:
                raise ValueError(f"`y_pred` must have rank 2 when `multi_label=True`. Found rank {y_pred.ndim}.")
            self._shape = (self.num_thresholds, y_pred.shape[1])
            self.reset_state()
        if self.from_logits:
            y_pred = (1 / (1 + numpy.exp(-y_pred.astype(numpy.float64)))).astype(numpy.float32)
        counts = keras_confusion_matrix_update(
            y_true, y_pred, self._thresholds, evenly=self._evenly, sample_weight=sample_weight,
            multi_label=self.multi_label, label_weights=None if self.multi_label else self.label_weights,
        )
        self.true_positives = (self.true_positives + counts["tp"]).astype(numpy.float32)
        self.false_positives = (self.false_positives + counts["fp"]).astype(numpy.float32)
        self.true_negatives = (self.true_negatives + counts["tn"]).astype(numpy.float32)
        self.false_negatives = (self.false_negatives + counts["fn"]).astype(numpy.float32)

    def _average(self, by_label):
        if not self.multi_label:
            return numpy.sum(by_label, dtype=numpy.float32)
        by_label = numpy.sum(by_label, axis=0, dtype=numpy.float32)
        if self.label_weights is None:
            return numpy.mean(by_label, dtype=numpy.float32)
        return keras_divide_no_nan(
            numpy.sum(by_label * self.label_weights, dtype=numpy.float32),
            numpy.sum(self.label_weights, dtype=numpy.float32),
        )

    def interpolate_pr_auc(self):
        tp, fp, fn = self.true_positives, self.false_positives, self.false_negatives
        dtp = tp[:-1] - tp[1:]
        p = tp + fp
        dp = p[:-1] - p[1:]
        slope = keras_divide_no_nan(dtp, numpy.maximum(dp, 0))
        intercept = tp[1:] - slope * p[1:]
        ratio = numpy.where(
            (p[:-1] > 0) & (p[1:] > 0), keras_divide_no_nan(p[:-1], numpy.maximum(p[1:], 0)), numpy.float32(1),
        ).astype(numpy.float32)
        increment = keras_divide_no_nan(
            slope * (dtp + intercept * numpy.log(ratio)), numpy.maximum(tp[1:] + fn[1:], 0),
        )
        return self._average(increment)

    def result(self):
        if self.curve == "PR" and self.summation_method == "interpolation":
            return numpy.asarray(self.interpolate_pr_auc(), numpy.float32)
        tp, fp, tn, fn = self.true_positives, self.false_positives, self.true_negatives, self.false_negatives
        recall = keras_divide_no_nan(tp, tp + fn)
        if self.curve == "ROC":
            x, y = keras_divide_no_nan(fp, fp + tn), recall
        elif self.curve == "PR":
            x, y = recall, keras_divide_no_nan(tp, tp + fp)
        else:
            scale = keras_divide_no_nan(tp + fn, tn + fp)
            recall_gain = numpy.float32(1) - scale * keras_divide_no_nan(fn, tp)
            precision_gain = numpy.float32(1) - scale * keras_divide_no_nan(fp, tp)
            recall_gain = numpy.maximum(numpy.where(tp == 0, numpy.float32(0), recall_gain), 0).astype(numpy.float32)
            precision_gain = numpy.where(tp == 0, numpy.float32(1), precision_gain).astype(numpy.float32)
            x, y = recall_gain, precision_gain
        if self.summation_method == "interpolation":
            heights = (y[:-1] + y[1:]) / numpy.float32(2)
        elif self.summation_method == "minoring":
            heights = numpy.minimum(y[:-1], y[1:])
        else:
            heights = numpy.maximum(y[:-1], y[1:])
        return numpy.asarray(self._average((x[:-1] - x[1:]) * heights), numpy.float32)

    def reset_state(self):
        if self._shape is not None:
            self.true_positives = numpy.zeros(self._shape, numpy.float32)
            self.false_positives = numpy.zeros(self._shape, numpy.float32)
            self.true_negatives = numpy.zeros(self._shape, numpy.float32)
            self.false_negatives = numpy.zeros(self._shape, numpy.float32)

    def reset_states(self):
        self.reset_state()

    def __call__(self, *args, **kwargs):
        self.update_state(*args, **kwargs)
        return self.result()
