"""TF's ``tf.linalg.set_diag(input, diagonal)`` (main diagonal, ``k=0``) in ``jax.numpy``.

TF replaces the main diagonal of the innermost ``[M, N]`` matrices, batched over leading
axes, with ``diagonal`` of shape ``[..., min(M, N)]``; the matrices may be non-square.
``jnp.fill_diagonal`` takes one scalar-or-vector for one 2-D (square-walk) array and is not
batched, so the update is written as an indexed ``.at[...].set`` on the last two axes.
"""

import jax


def tf_set_diag(input, diagonal):
    """``input`` with the main diagonal of its last two axes replaced by ``diagonal``."""
    input = jax.numpy.asarray(input)
    diagonal = jax.numpy.asarray(diagonal, dtype=input.dtype)
    size = min(input.shape[-2], input.shape[-1])
    if diagonal.shape[-1] != size:
        raise ValueError(f"set_diag: diagonal has {diagonal.shape[-1]} entries, the matrices {size}")
    index = jax.numpy.arange(size)
    return input.at[..., index, index].set(diagonal)
