"""Keras' ``OrthogonalRegularizer`` as a hashable callable.

keras/src/regularizers/regularizers.py: the rows (``mode="rows"``) or columns of a rank-2
weight are L2-normalized as ``keras.ops.normalize`` does (``x * min(rsqrt(sum(x ** 2)),
1 / 1e-7)``), and the penalty is ``factor * 0.5 * sum(|off-diagonal of the Gram matrix|)``
divided by the number of pairs. The factor is a float32 tensor in Keras. Translations import it from the package's generated support module
(``{support:KerasOrthogonalRegularizer}`` in a template).
"""

import dataclasses
import math

import jax


@dataclasses.dataclass(frozen=True)
class KerasOrthogonalRegularizer:
    """Penalizes non-orthogonal rows (or columns) of a rank-2 weight, as Keras does."""

    factor: float = 0.01
    mode: str = "rows"

    def __post_init__(self):
        if not isinstance(self.factor, (float, int)) or math.isinf(self.factor) or math.isnan(self.factor) or self.factor < 0:
            raise ValueError(f"Invalid value for argument factor: expected a non-negative float. Received: factor={self.factor}")
        if self.mode not in ("rows", "columns"):
            raise ValueError(f'Invalid value for argument `mode`. Expected one of {{"rows", "columns"}}. Received: mode={self.mode}')
        object.__setattr__(self, "factor", float(self.factor))

    def __call__(self, inputs):
        inputs = jax.numpy.asarray(inputs)
        if inputs.ndim != 2:
            raise ValueError(f"Inputs to OrthogonalRegularizer must have rank 2. Received: inputs.shape={inputs.shape}")
        axis = 1 if self.mode == "rows" else 0
        inv_norm = jax.lax.rsqrt(jax.numpy.sum(jax.numpy.square(inputs), axis=axis, keepdims=True))
        inputs = inputs * jax.numpy.minimum(inv_norm, 1.0 / 1e-7)
        if self.mode == "rows":
            product, size = inputs @ inputs.T, inputs.shape[0]
        else:
            product, size = inputs.T @ inputs, inputs.shape[1]
        product_no_diagonal = product * (1.0 - jax.numpy.eye(size, dtype=inputs.dtype))
        num_pairs = size * (size - 1.0) / 2.0
        factor = jax.numpy.asarray(self.factor, jax.numpy.float32)
        return factor * 0.5 * jax.numpy.sum(jax.numpy.abs(product_no_diagonal)) / num_pairs
