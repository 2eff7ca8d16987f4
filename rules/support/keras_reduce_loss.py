"""Keras' ``reduce_weighted_values`` (keras/src/losses/loss.py): per-sample losses weighted and reduced.

Sample weights are lined up by rank and multiplied in; ``"sum_over_batch_size"`` (the
default) and ``"mean"`` divide the weighted sum by the number of loss entries (not by the sum
of the weights), ``"mean_with_sample_weight"`` by the sum of the weights, ``"sum"`` sums,
``"none"``/``None`` keeps the per-sample losses (so does a scalar or empty loss). Used by
``keras_loss`` and ``KerasLoss``; translations import it from the package's generated support module.
"""

import jax

from .keras_same_rank import keras_same_rank


def keras_reduce_loss(values, sample_weight=None, reduction="sum_over_batch_size"):
    """``values`` times ``sample_weight``, reduced as Keras reduces a loss."""
    values = jax.numpy.asarray(values)
    if sample_weight is not None:
        values, sample_weight = keras_same_rank(values, jax.numpy.asarray(sample_weight, values.dtype))
        values = values * sample_weight
    if reduction in (None, "none") or values.shape in ((), (0,)):
        return values
    total = jax.numpy.sum(values)
    if reduction == "sum":
        return total
    if reduction == "mean_with_sample_weight" and sample_weight is not None:
        divisor = jax.numpy.sum(sample_weight).astype(total.dtype)
    else:
        divisor = jax.numpy.asarray(values.size, total.dtype)
    return jax.numpy.where(divisor != 0, total / jax.numpy.where(divisor != 0, divisor, 1), 0.0)
