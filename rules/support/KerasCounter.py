"""A ``tf.Variable`` holding an integer count (an epoch or save counter kept in a checkpoint).

Keras training loops keep counters in ``tf.Variable(0, dtype=tf.int64)`` tracked by a
``tf.train.Checkpoint`` and bump them with ``assign_add``. The translated loop runs on the
host, outside jit, so a mutable NumPy scalar of the same dtype is exact: int64 stays int64
(a JAX array would silently be int32 unless jax_enable_x64 is on) and arithmetic wraps as
TF's does. ``int()``, comparisons and arithmetic read the value, as they read a TF variable.
Translations import it from the package's generated support module.
"""

import numpy


class KerasCounter:
    """An integer ``tf.Variable``: ``assign``/``assign_add``/``assign_sub`` change it in place."""

    __hash__ = None  # a TF variable is unhashable too (use it by identity)

    def __init__(self, initial_value=0, dtype=numpy.int64, name=None):
        value = numpy.asarray(initial_value)
        if value.shape != () or not (numpy.issubdtype(value.dtype, numpy.integer) or value.dtype == bool):
            raise TypeError(f"KerasCounter holds one integer; got {initial_value!r}")
        self.dtype = numpy.dtype(dtype)
        if not numpy.issubdtype(self.dtype, numpy.integer):
            raise TypeError(f"KerasCounter holds an integer dtype; got {self.dtype}")
        self.name = name
        self._value = numpy.array(initial_value, self.dtype)

    @property
    def shape(self):
        return ()

    def assign(self, value):
        self._value = numpy.array(numpy.asarray(value).astype(self.dtype), self.dtype)
        return self

    def assign_add(self, delta):
        return self.assign(self._value + numpy.asarray(delta, self.dtype))

    def assign_sub(self, delta):
        return self.assign(self._value - numpy.asarray(delta, self.dtype))

    def numpy(self):
        return self._value[()]

    def read_value(self):
        return self._value[()]

    def value(self):
        return self._value[()]

    def __array__(self, dtype=None, copy=None):
        return numpy.array(self._value, dtype)

    def __int__(self):
        return int(self._value)

    def __index__(self):
        return int(self._value)

    def __float__(self):
        return float(self._value)

    def __bool__(self):
        return bool(self._value)

    def __eq__(self, other):
        return self._value[()] == numpy.asarray(other)

    def __ne__(self, other):
        return self._value[()] != numpy.asarray(other)

    def __lt__(self, other):
        return self._value[()] < numpy.asarray(other)

    def __le__(self, other):
        return self._value[()] <= numpy.asarray(other)

    def __gt__(self, other):
        return self._value[()] > numpy.asarray(other)

    def __ge__(self, other):
        return self._value[()] >= numpy.asarray(other)

    def __add__(self, other):
        return self._value[()] + numpy.asarray(other)

    __radd__ = __add__

    def __sub__(self, other):
        return self._value[()] - numpy.asarray(other)

    def __rsub__(self, other):
        return numpy.asarray(other) - self._value[()]

    def __mul__(self, other):
        return self._value[()] * numpy.asarray(other)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        return self._value[()] // numpy.asarray(other)

    def __mod__(self, other):
        return self._value[()] % numpy.asarray(other)

    def __neg__(self):
        return -self._value[()]

    def __repr__(self):
        return f"KerasCounter({self._value[()]!r}, dtype={self.dtype.name})"
