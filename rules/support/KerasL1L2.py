"""Keras' ``L1``, ``L2`` and ``L1L2`` weight regularizers as one hashable callable.

keras/src/regularizers/regularizers.py: ``L1(l1)(x)`` is ``l1 * sum(|x|)``, ``L2(l2)(x)`` is
``l2 * sum(x ** 2)`` and ``L1L2(l1, l2)(x)`` is ``0 + l1 * sum(|x|) + l2 * sum(x ** 2)``, each
term only when its factor is not 0. The TensorFlow backend casts a Python factor through
float32 to ``x``'s dtype (``L1`` stores it as a float32 tensor), so all three are this class
with the other factor 0, exactly. Factors are validated as Keras does (finite, not negative).
A frozen dataclass, so a Flax module holding one stays hashable (a jit static argument).
Translations import it from the package's generated support module
(``{support:KerasL1L2}`` in a template).
"""

import dataclasses
import math

import jax


@dataclasses.dataclass(frozen=True)
class KerasL1L2:
    """``l1 * sum(|x|) + l2 * sum(x ** 2)``, as Keras' L1/L2/L1L2 regularizers compute it."""

    l1: float = 0.0
    l2: float = 0.0

    def __post_init__(self):
        for name in ("l1", "l2"):
            value = getattr(self, name)
            if not isinstance(value, (float, int)) or math.isinf(value) or math.isnan(value) or value < 0:
                raise ValueError(f"Invalid value for argument {name}: expected a non-negative float. Received: {name}={value}")
            object.__setattr__(self, name, float(value))

    def __call__(self, x):
        x = jax.numpy.asarray(x)
        regularization = jax.numpy.asarray(0.0, x.dtype)
        if self.l1 != 0.0:
            regularization += jax.numpy.asarray(self.l1, jax.numpy.float32).astype(x.dtype) * jax.numpy.sum(jax.numpy.abs(x))
        if self.l2 != 0.0:
            regularization += jax.numpy.asarray(self.l2, jax.numpy.float32).astype(x.dtype) * jax.numpy.sum(jax.numpy.square(x))
        return regularization
