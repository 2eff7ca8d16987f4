"""TF's ``tf.unique(x)`` in NumPy/``jax.numpy``: first-occurrence order, exact size.

TF keeps the unique values in the order they first occur and returns ``idx`` mapping each
element to its value; ``jax.numpy.unique`` sorts the values, and its jittable form pads to a
static ``size``: either would change what code built on ``y[0]``, ``len(y)`` or ``argmax``
over the counts computes. The size is data-dependent, so this runs on concrete values
(TF eager) and fails loudly on traced ones (inside ``jax.jit``/``jax.lax.map``), where TF
would need a graph with a dynamic shape.
"""

from typing import NamedTuple

import jax
import numpy


class TFUnique(NamedTuple):
    y: jax.Array
    idx: jax.Array


def _first_occurrence_unique(x):
    if isinstance(x, jax.core.Tracer):
        raise TypeError("tf.unique has a data-dependent size: call it outside jax.jit / jax.lax.map (on concrete values)")
    x = numpy.asarray(x)
    if x.ndim != 1:
        raise ValueError(f"tf.unique expects a 1-D tensor, got shape {x.shape}")
    equal_nan = not numpy.issubdtype(x.dtype, numpy.inexact)  # TF: every NaN is its own value
    values, first, inverse, counts = numpy.unique(
        x, return_index=True, return_inverse=True, return_counts=True, equal_nan=equal_nan
    )
    order = numpy.argsort(first, kind="stable")
    rank = numpy.empty_like(order)
    rank[order] = numpy.arange(order.size)
    return values[order], rank[inverse.reshape(-1)], counts[order]


def tf_unique(x, out_idx=jax.numpy.int32):
    """``(y, idx)``: unique values of 1-D ``x`` in first-occurrence order, ``x == y[idx]``."""
    y, idx, _ = _first_occurrence_unique(x)
    return TFUnique(jax.numpy.asarray(y), jax.numpy.asarray(idx, dtype=out_idx))
