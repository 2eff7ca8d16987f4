"""TF's ``tf.unique_with_counts(x)``: ``tf.unique`` plus how often each value occurs.

Same order (first occurrence) and the same concrete-values-only contract as ``tf_unique``
(see there why ``jnp.unique`` is not it); ``count`` has ``out_idx``'s dtype, as in TF.
"""

from typing import NamedTuple

import jax

from .tf_unique import _first_occurrence_unique


class TFUniqueWithCounts(NamedTuple):
    y: jax.Array
    idx: jax.Array
    count: jax.Array


def tf_unique_with_counts(x, out_idx=jax.numpy.int32):
    """``(y, idx, count)``: ``tf_unique(x)`` and the occurrences of each ``y``."""
    y, idx, count = _first_occurrence_unique(x)
    return TFUniqueWithCounts(
        jax.numpy.asarray(y), jax.numpy.asarray(idx, dtype=out_idx), jax.numpy.asarray(count, dtype=out_idx)
    )
