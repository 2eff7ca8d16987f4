"""TF's ``tf.norm(tensor, ord, axis, keepdims)`` with an explicit ``ord``, in ``jax.numpy``.

TF and ``jnp.linalg.norm`` read ``ord`` differently: TF's default ``'euclidean'`` has no jnp
spelling (the 2-norm of a vector, the Frobenius norm of a matrix, ``ord=None`` in jnp), and
with ``axis=None`` TF applies ``ord`` to the FLATTENED tensor as a vector norm while
``jnp.linalg.norm`` takes a 2-D input as a matrix (``ord=1``: sum of all entries' magnitudes
in TF, the largest column sum in jnp). An int axis is a vector norm and a pair of axes a
matrix norm (``'fro'``/``'euclidean'``, 1, 2, ``inf``) on both sides once ``ord`` is spelled
for jnp. ``'fro'`` for a vector is an error in TF, and here.
"""

import jax


def tf_norm(tensor, ord="euclidean", axis=None, keepdims=None):
    """The ``ord`` norm of ``tensor`` over ``axis`` (all elements as one vector when None)."""
    x = jax.numpy.asarray(tensor)
    keepdims = bool(keepdims)
    if isinstance(axis, (tuple, list)) and len(axis) == 2:
        matrix_ord = "fro" if ord in ("euclidean", "fro") else ord
        return jax.numpy.linalg.norm(x, ord=matrix_ord, axis=tuple(axis), keepdims=keepdims)
    if ord == "fro":
        raise ValueError(f"'ord' must be a supported vector norm, got {ord}")
    vector_ord = None if ord == "euclidean" else ord
    if isinstance(axis, (tuple, list)):
        (axis,) = axis
    if axis is None:
        out = jax.numpy.linalg.norm(x.reshape(-1), ord=vector_ord)
        return out.reshape((1,) * x.ndim) if keepdims else out
    return jax.numpy.linalg.norm(x, ord=vector_ord, axis=axis, keepdims=keepdims)
