"""A Keras variable in a translated test: an array that stays the object's current value.

Keras variables are objects the model holds: ``kernel = model.layers[0].kernel`` sees the
new value after training, and ``kernel.assign(value)`` changes the model. A Flax module's
variables are a tree of immutable arrays kept apart from it (in a test, the registry of
rules/testing/module_calls.py), so this object reads its array through ``read()`` each time
and ``assign`` hands the new one to ``write``, with Keras' shape check. NumPy takes it as an
array (``np.asarray(v)``, ``v.numpy()``, ``np.testing``), so do ``jnp.asarray`` and
``jnp.zeros_like`` and the arithmetic operators; other ``jnp`` functions and ``jax.jit``
need the array itself: ``jnp.asarray(v)``.
Translations import it from the package's generated support module.
"""

import jax
import numpy


class KerasVariable:
    """A variable whose value ``read()`` gives and ``write(array)`` replaces."""

    def __init__(self, read, write):
        self._read = read
        self._write = write

    @property
    def value(self):
        return self._read()

    def assign(self, value):
        current = self.value
        value = jax.numpy.asarray(value, current.dtype)
        if value.shape != current.shape:
            raise ValueError(f"Cannot assign a value of shape {value.shape} to a variable of shape {current.shape}")
        self._write(value)
        return self

    def assign_add(self, delta):
        return self.assign(self.value + jax.numpy.asarray(delta))

    def assign_sub(self, delta):
        return self.assign(self.value - jax.numpy.asarray(delta))

    def numpy(self):
        return numpy.asarray(self.value)

    def __array__(self, dtype=None, copy=None):
        return numpy.asarray(self.value, dtype)

    def __jax_array__(self):
        return jax.numpy.asarray(self.value)

    @property
    def shape(self):
        return self.value.shape

    @property
    def dtype(self):
        return self.value.dtype

    @property
    def ndim(self):
        return self.value.ndim

    def __len__(self):
        return len(self.value)

    def __getitem__(self, index):
        return self.value[index]

    def __neg__(self):
        return -self.value

    def __add__(self, other):
        return self.value + other

    def __radd__(self, other):
        return other + self.value

    def __sub__(self, other):
        return self.value - other

    def __rsub__(self, other):
        return other - self.value

    def __mul__(self, other):
        return self.value * other

    def __rmul__(self, other):
        return other * self.value

    def __truediv__(self, other):
        return self.value / other

    def __rtruediv__(self, other):
        return other / self.value

    def __pow__(self, other):
        return self.value ** other

    def __matmul__(self, other):
        return self.value @ other

    def __rmatmul__(self, other):
        return other @ self.value

    def __repr__(self):
        return f"{type(self).__name__}({self.value!r})"
