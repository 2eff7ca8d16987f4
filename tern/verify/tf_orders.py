"""Orders TF leaves unspecified, asked for sorted wherever TF runs for a comparison.

``top_k(sorted=False)`` leaves the order of its results unspecified (TF's CPU kernel
returns what its selection left), and the translation's ``lax.top_k`` sorts. TF is asked
for the sorted order, which its contract allows: both sides then compute the same valid
result. The recorder does this while the original tests run (they cannot rely on an order
either), and so do the TF jobs that rebuild a layer from its recording (the float64
reference, the search): a point they compute must be in the order the recording was.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator


def sorted_patches() -> list[tuple[Any, str, Any]]:
    """``(owner, attribute, replacement)`` for every TF entry point with an unspecified order."""
    import tensorflow as tf

    top_k = tf.math.top_k

    def sorted_top_k(input, k=1, sorted=True, index_type=tf.int32, name=None):  # noqa: A002 - TF's names
        return top_k(input, k=k, sorted=True, index_type=index_type, name=name)

    return [(owner, "top_k", sorted_top_k) for owner in (tf.math, tf.nn)]


@contextlib.contextmanager
def sorted_orders() -> Iterator[None]:
    """TF's unspecified orders sorted inside the block (``sorted_patches``), restored after."""
    patches = sorted_patches()
    before = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in reversed(before):
            setattr(owner, name, value)
