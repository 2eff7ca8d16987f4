"""TF's pooling ``ksize``/``strides`` as flax.linen's window, for values known only at run time.

``tf.nn.max_pool`` (``avg_pool``, and their 1d/2d/3d forms) take an int, or a list of 1, N
or N + 2 ints for an N-D pool, the N + 2 form with 1 for the batch and the channels (NHWC);
flax.linen's ``max_pool``/``avg_pool`` take the N spatial sizes. The translation converts
literals itself (tern/engine/convert.py) and calls this for a variable such as
``window = [1, h, w, 1]``.
"""


def tf_pool_window(value, spatial=None):
    """The spatial tuple of TF's ``value``; ``spatial`` is N when the op says it (max_pool2d),
    else N is read from the length: 2 ([h, w]), 4 ([1, h, w, 1]) or 5 ([1, d, h, w, 1]); otherwise a
    ValueError, never a guess."""
    if isinstance(value, int):
        if spatial is None:
            raise ValueError(f"an int window {value} does not say the pool's rank: pass a [1, ..., 1] list")
        return (value,) * spatial
    value = tuple(int(v) for v in value)
    if spatial is None:
        spatial = {2: 2, 4: 2, 5: 3}.get(len(value))
        if spatial is None:
            raise ValueError(f"window {value} does not say the pool's rank: pass a [1, ..., 1] list")
    if len(value) == 1:
        return value * spatial
    if len(value) == spatial + 2:
        if value[0] != 1 or value[-1] != 1:
            raise ValueError(f"window {value} pools over the batch or channels: flax pools spatial dims only (NHWC)")
        return value[1:-1]
    if len(value) == spatial:
        return value
    raise ValueError(f"window {value} is not 1, {spatial} or {spatial + 2} ints")
