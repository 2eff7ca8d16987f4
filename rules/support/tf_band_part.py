"""``tf.linalg.band_part`` for band widths other than the two triangles.

TF keeps ``input[..., i, j]`` where ``(num_lower < 0 or i - j <= num_lower)`` and
``(num_upper < 0 or j - i <= num_upper)`` and zeroes the rest, over the last two axes; a
negative width keeps that whole triangle. ``jax.numpy.tril``/``jax.numpy.triu`` take one offset and no
"whole triangle" sentinel, so the table writes them for the literal (-1, 0) and (0, -1) and
calls this for anything else (a variable width, a band). Widths may be traced: jittable.
"""

import jax


def tf_band_part(input, num_lower, num_upper):
    """``input`` with everything outside TF's band zeroed (batched over leading axes)."""
    input = jax.numpy.asarray(input)
    rows = jax.numpy.arange(input.shape[-2])[:, None]
    cols = jax.numpy.arange(input.shape[-1])[None, :]
    keep = ((num_lower < 0) | (rows - cols <= num_lower)) & ((num_upper < 0) | (cols - rows <= num_upper))
    return jax.numpy.where(keep, input, jax.numpy.zeros((), input.dtype))
