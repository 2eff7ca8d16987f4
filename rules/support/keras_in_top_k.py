"""``tf.math.in_top_k`` (what Keras' ``ops.in_top_k`` runs on TensorFlow) in ``jax.numpy``.

True when fewer than ``k`` classes have a strictly larger prediction than the target class:
classes tied with the target at the top-k boundary all count as in the top k. A target
outside ``[0, classes)`` or a row with a non-finite prediction gives False, as TF's kernel.
``jax.lax.top_k`` would break ties by index instead. Used by the top-k accuracy metrics;
translations import it from the package's generated support module.
"""

import jax


def keras_in_top_k(targets, predictions, k):
    """``targets`` (n,) int, ``predictions`` (n, classes): whether each target is in its row's top ``k``."""
    targets = jax.numpy.asarray(targets).astype(jax.numpy.int32)
    predictions = jax.numpy.asarray(predictions)
    valid = (targets >= 0) & (targets < predictions.shape[-1])
    target_prediction = jax.numpy.take_along_axis(
        predictions, jax.numpy.where(valid, targets, 0)[:, None], axis=-1
    )
    larger = jax.numpy.sum(predictions > target_prediction, axis=-1)
    finite = jax.numpy.all(jax.numpy.isfinite(predictions), axis=-1)
    return valid & finite & (larger < k)
