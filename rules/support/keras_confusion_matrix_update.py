"""Keras' ``update_confusion_matrix_variables`` (keras/src/metrics/metrics_utils.py) in NumPy float32.

What one batch adds to the true/false positive/negative counts at each threshold, for
``Precision``, ``Recall`` and ``AUC``. A prediction is positive at a threshold when it is
strictly greater; a label is positive when it is non-zero. Everything is float32, as Keras'
variables. Both of Keras' paths are kept, because they differ:

* thresholds evenly spaced over [0, 1] (``evenly``; AUC's defaults): predictions are clipped
  to [0, 1] and bucketed with ``ceil(p * (n - 1)) - 1`` (below 0 dropped, or, when the end
  thresholds carry AUC's +-1e-7, raised to 0), weights summed per bucket in order and
  accumulated from the top; so a prediction above 1 is not counted at a threshold of 1;
* otherwise every prediction is compared with every threshold.

``top_k`` keeps each row's k largest predictions (ties: the lower index first, as
``tf.math.top_k``) and sets the others to -1e10; ``class_id`` keeps one column. Sample
weights get a trailing axis, are lined up by rank with the labels and broadcast to the
predictions. ``multi_label`` keeps the last axis apart (counts of shape (thresholds,
labels)); otherwise everything is flattened and ``label_weights`` weigh the last axis.
Translations import it from the package's generated support module.
"""

import numpy

from .keras_same_rank import keras_same_rank


def keras_confusion_matrix_update(
    y_true, y_pred, thresholds, evenly=False, top_k=None, class_id=None, sample_weight=None,
    multi_label=False, label_weights=None,
):
    """``{"tp": ..., "fp": ..., "tn": ..., "fn": ...}``: this batch's float32 counts per threshold."""
    f32 = numpy.float32
    y_true = numpy.asarray(y_true).astype(f32)
    y_pred = numpy.asarray(y_pred).astype(f32)
    with_epsilon = evenly and (thresholds[0] < 0.0 or thresholds[-1] > 1.0)
    thresholds = numpy.asarray(thresholds).astype(f32)
    count = thresholds.shape[0]
    y_pred, y_true = (numpy.asarray(v) for v in keras_same_rank(y_pred, y_true))
    if sample_weight is not None:
        sample_weight = numpy.expand_dims(numpy.asarray(sample_weight).astype(f32), -1)
        sample_weight = numpy.asarray(keras_same_rank(y_true, sample_weight, expand_rank_1=False)[1])
    if top_k is not None:
        order = numpy.argsort(-y_pred, axis=-1, kind="stable")[..., :top_k]
        keep = numpy.zeros(y_pred.shape, f32)
        numpy.put_along_axis(keep, order, f32(1), axis=-1)
        y_pred = (y_pred * keep + f32(-1e10) * (f32(1) - keep)).astype(f32)
    if class_id is not None:
        if y_pred.ndim == 1:
            raise ValueError(f"When class_id is provided, y_pred must be a 2D array with shape (num_samples, num_classes), found shape: {y_pred.shape}")
        y_true = y_true[..., class_id, None]
        y_pred = y_pred[..., class_id, None]
    weights = f32(1)
    if sample_weight is not None:
        weights = numpy.broadcast_to(sample_weight, y_pred.shape).astype(f32)
    if label_weights is not None and not multi_label:
        weights = (weights * numpy.broadcast_to(numpy.asarray(label_weights, f32)[None], y_pred.shape)).astype(f32)
    weights = numpy.broadcast_to(weights, y_pred.shape)
    positive = y_true != 0
    if not multi_label:
        y_pred, positive, weights = y_pred.reshape(-1), positive.reshape(-1), weights.reshape(-1)
    if evenly:
        true_labels = numpy.where(positive, weights, f32(0)).astype(f32)
        false_labels = numpy.where(positive, f32(0), weights).astype(f32)
        buckets = numpy.ceil(numpy.clip(y_pred, f32(0), f32(1)) * f32(count - 1)) - f32(1)
        if with_epsilon:
            buckets = numpy.maximum(buckets, f32(0))
        buckets = buckets.astype(numpy.int32)
        columns = 1 if not multi_label else y_pred.shape[-1]
        buckets, true_labels, false_labels = (
            a.reshape(-1, columns) for a in (buckets, true_labels, false_labels)
        )
        per_bucket = numpy.zeros((2, count, columns), f32)
        rows, cols = numpy.nonzero(buckets >= 0)
        numpy.add.at(per_bucket[0], (buckets[rows, cols], cols), true_labels[rows, cols])
        numpy.add.at(per_bucket[1], (buckets[rows, cols], cols), false_labels[rows, cols])
        tp, fp = numpy.flip(numpy.cumsum(numpy.flip(per_bucket, 1), axis=1, dtype=f32), 1)
        fn = numpy.sum(true_labels, axis=0, dtype=f32) - tp
        tn = numpy.sum(false_labels, axis=0, dtype=f32) - fp
        counts = {"tp": tp, "fp": fp, "tn": tn, "fn": fn}
        if not multi_label:
            counts = {k: v[:, 0] for k, v in counts.items()}
        return counts
    shape = (count,) + (1,) * y_pred.ndim
    above = y_pred[None] > thresholds.reshape(shape)
    labels = numpy.broadcast_to(positive[None], above.shape)
    weights = numpy.broadcast_to(weights[None], above.shape)

    def total(hit):
        return numpy.sum(numpy.where(hit, weights, f32(0)), axis=1, dtype=f32)

    return {
        "tp": total(labels & above), "fp": total(~labels & above),
        "tn": total(~labels & ~above), "fn": total(labels & ~above),
    }
