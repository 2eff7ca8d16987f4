"""TF's ``tf.lookup.KeyValueTensorInitializer(keys, values)``: the contents of a static table.

TF's initializer only holds the two tensors (cast to ``key_dtype``/``value_dtype`` when
given) until a table is built from it; JAX has no table type to hand them to, so it is the
pair ``(keys, values)`` that ``TFStaticHashTable`` takes.
"""

import jax


def tf_key_value_initializer(keys, values, key_dtype=None, value_dtype=None):
    """``(keys, values)`` as flat arrays of equal length."""
    keys = jax.numpy.asarray(keys, dtype=key_dtype).reshape(-1)
    values = jax.numpy.asarray(values, dtype=value_dtype).reshape(-1)
    if keys.shape != values.shape:
        raise ValueError(f"KeyValueTensorInitializer: {keys.shape[0]} keys but {values.shape[0]} values")
    return keys, values
