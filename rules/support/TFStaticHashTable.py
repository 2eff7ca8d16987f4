"""TF's ``tf.lookup.StaticHashTable(initializer, default_value)``: an immutable key-value map.

``initializer`` is ``tf_key_value_initializer``'s pair. JAX has no hash table; a static table is small and fixed, so ``lookup`` compares every
query with every key (``keys[..., None] == table_keys``), which is exact, keeps the query's
shape like TF, gives ``default_value`` for a missing key, and traces under ``jax.jit``. TF
refuses a key given twice with different values when the table is built; so does this
(on concrete keys).
"""

import jax
import numpy


class TFStaticHashTable:
    """``lookup(keys)`` maps each element of ``keys`` to its value, else ``default_value``."""

    def __init__(self, initializer, default_value):
        self._keys, self._values = initializer
        self._default = jax.numpy.asarray(default_value, dtype=self._values.dtype)
        if not isinstance(self._keys, jax.core.Tracer) and not isinstance(self._values, jax.core.Tracer):
            seen = {}
            for key, value in zip(numpy.asarray(self._keys).tolist(), numpy.asarray(self._values).tolist()):
                if seen.setdefault(key, value) != value:
                    raise ValueError(f"HashTable has different value for same key. Key {key} has {seen[key]} and trying to add value {value}")

    @property
    def key_dtype(self):
        return self._keys.dtype

    @property
    def value_dtype(self):
        return self._values.dtype

    def size(self):
        """How many distinct keys (TF counts a key given twice once); concrete keys only."""
        return jax.numpy.asarray(numpy.unique(numpy.asarray(self._keys)).size)

    def lookup(self, keys):
        keys = jax.numpy.asarray(keys)
        if keys.dtype != self._keys.dtype:
            raise TypeError(f"lookup: keys of dtype {keys.dtype}, the table's are {self._keys.dtype}")
        hits = keys[..., None] == self._keys
        found = hits.any(axis=-1)
        values = self._values[jax.numpy.argmax(hits, axis=-1)]
        return jax.numpy.where(found, values, self._default)
