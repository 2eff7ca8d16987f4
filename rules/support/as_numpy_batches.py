"""Batches from a tf.data dataset as NumPy, so that jax.jit accepts them."""


def as_numpy_batches(batches):
    """``batches.as_numpy_iterator()`` when it has one (a tf.data dataset), else ``batches``.

    A tf.data dataset yields TF EagerTensors, which jax.jit refuses as arguments ("not a
    valid JAX type"); ``as_numpy_iterator()`` yields the same elements, structure kept,
    as NumPy arrays. Anything else (a list of arrays, a generator) is iterated as it is,
    and so is a dataset whose elements NumPy cannot hold (datasets of datasets, from
    ``window``): ``as_numpy_iterator`` refuses those with a TypeError.
    """
    as_numpy = getattr(batches, "as_numpy_iterator", None)
    if as_numpy is None:
        return batches
    try:
        return as_numpy()
    except TypeError:
        return batches
