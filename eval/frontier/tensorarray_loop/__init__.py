"""A recurrence unrolled with tf.while_loop and a TensorArray."""

from tensorarray_loop.layers import ElmanRecurrence

__all__ = ["ElmanRecurrence"]
