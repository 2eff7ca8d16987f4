"""A Keras loss object's call (``loss_fn(y_true, y_pred, sample_weight=None)``) in ``jax.numpy``.

``keras.losses.BinaryCrossentropy(...)`` and the other loss classes translate to
``functools.partial(keras_loss, <per-sample loss>, **options)``. The call follows Keras'
``LossFunctionWrapper.call`` and ``reduce_weighted_values`` (keras/src/losses/): labels and
predictions are lined up by rank, the per-sample loss is computed, entries of
``ignore_class`` are masked out, sample weights are lined up by rank and multiplied in, and
the result is reduced: ``"sum_over_batch_size"`` (the default) and ``"mean"`` divide the
weighted sum by the number of loss entries (not by the sum of the weights),
``"mean_with_sample_weight"`` by the sum of the weights, ``"sum"`` sums, ``"none"``/``None``
keeps the per-sample losses. A Keras mask carried by ``y_pred`` from a masking layer has no
JAX counterpart: pass such a mask as ``sample_weight``. Translations import it from the package's generated support module.
"""

import jax

from .keras_reduce_loss import keras_reduce_loss
from .keras_same_rank import keras_same_rank

def keras_loss(fn, y_true, y_pred, sample_weight=None, *, reduction="sum_over_batch_size", **options):
    """``fn(y_true, y_pred, **options)`` per sample, weighted and reduced as a Keras loss object does."""
    y_true, y_pred = keras_same_rank(y_true, y_pred)
    values = fn(y_true, y_pred, **options)
    ignore_class = options.get("ignore_class")
    if ignore_class is not None:
        labels = y_true
        if labels.ndim == y_pred.ndim and labels.shape[options.get("axis", -1)] == 1:
            labels = jax.numpy.squeeze(labels, options.get("axis", -1))
        valid = labels != ignore_class
        if reduction in ("mean", "sum_over_batch_size"):
            count = jax.numpy.sum(valid.astype(values.dtype))
            scale = jax.numpy.where(count > 0, valid.size / jax.numpy.where(count > 0, count, 1), 0.0)
            mask = jax.numpy.where(valid, scale, 0.0).astype(values.dtype)
        else:
            mask = valid.astype(values.dtype)
        if sample_weight is None:
            sample_weight = mask
        else:
            mask, sample_weight = keras_same_rank(mask, jax.numpy.asarray(sample_weight, values.dtype))
            sample_weight = sample_weight * mask
    return keras_reduce_loss(values, sample_weight, reduction)
