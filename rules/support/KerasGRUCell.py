"""A GRU cell with exactly Keras' parametrization, for ``flax.linen.RNN``.

flax.linen.GRUCell keeps one Dense per gate and a single bias where Keras keeps two;
Keras ``GRUCell`` keeps three fused variables: ``kernel`` (in, 3u), ``recurrent_kernel``
(u, 3u) and ``bias``, gates in the order z, r, h. With ``reset_after=True`` (the Keras 3
default) ``bias`` is (2, 3u), row 0 added to the input projection and row 1 to the
recurrent one, and the reset gate multiplies the recurrent projection; with
``reset_after=False`` ``bias`` is (3u,) and the reset gate multiplies the state before
the recurrent matmul (keras/src/layers/rnn/gru.py, ``build`` and ``call``). This cell has
those params under those names, so variable counts, checkpoints and the initialization
agree with Keras, for both variants.

An initializer of None is what Keras' ``add_weight(initializer=None)`` does: glorot_uniform
(so ``recurrent_initializer=None`` is glorot_uniform, not orthogonal; a 1-D bias has fans (n, n)).

The carry is the state array ``h`` (flax GRUCell's layout; Keras' state list holds just
``h``). Translations import it from the package's generated support module
(``{support:KerasGRUCell}`` in a template).
"""

import typing

import flax.linen
import jax


class KerasGRUCell(flax.linen.RNNCellBase):
    """Keras ``GRUCell``: params ``kernel``, ``recurrent_kernel``, ``bias`` (gates z, r, h); carry ``h``."""

    features: int
    activation: typing.Callable[..., typing.Any] = jax.numpy.tanh
    recurrent_activation: typing.Callable[..., typing.Any] = jax.nn.sigmoid
    use_bias: bool = True
    kernel_init: typing.Callable[..., typing.Any] | None = flax.linen.initializers.glorot_uniform()
    recurrent_kernel_init: typing.Callable[..., typing.Any] | None = flax.linen.initializers.orthogonal()
    bias_init: typing.Callable[..., typing.Any] | None = flax.linen.initializers.zeros_init()
    reset_after: bool = True
    param_dtype: typing.Any = jax.numpy.float32

    @flax.linen.compact
    def __call__(self, carry, inputs):
        h = carry
        units = self.features
        kernel = self.param("kernel", self.kernel_init or self.keras_default_init, (inputs.shape[-1], 3 * units), self.param_dtype)
        recurrent_kernel = self.param("recurrent_kernel", self.recurrent_kernel_init or self.keras_default_init, (units, 3 * units), self.param_dtype)
        bias = None
        if self.use_bias:
            shape = (2, 3 * units) if self.reset_after else (3 * units,)
            bias = self.param("bias", self.bias_init or self.keras_default_init, shape, self.param_dtype)
        x = inputs @ kernel
        if bias is not None:
            x = x + (bias[0] if self.reset_after else bias)
        x_z, x_r, x_h = jax.numpy.split(x, 3, axis=-1)
        if self.reset_after:
            inner = h @ recurrent_kernel
            if bias is not None:
                inner = inner + bias[1]
            h_z, h_r, h_h = jax.numpy.split(inner, 3, axis=-1)
            z = self.recurrent_activation(x_z + h_z)
            r = self.recurrent_activation(x_r + h_r)
            candidate = self.activation(x_h + r * h_h)
        else:
            h_z, h_r = jax.numpy.split(h @ recurrent_kernel[:, : 2 * units], 2, axis=-1)
            z = self.recurrent_activation(x_z + h_z)
            r = self.recurrent_activation(x_r + h_r)
            candidate = self.activation(x_h + (r * h) @ recurrent_kernel[:, 2 * units :])
        h = z * h + (1 - z) * candidate
        return h, h

    @staticmethod
    def keras_default_init(key, shape, dtype):
        """Keras ``add_weight(initializer=None)``: glorot_uniform, a 1-D shape ``(n,)`` with fans ``(n, n)``."""
        if len(shape) == 1:
            return flax.linen.initializers.glorot_uniform()(key, (shape[0], shape[0]), dtype)[0]
        return flax.linen.initializers.glorot_uniform()(key, shape, dtype)

    @flax.linen.nowrap
    def initialize_carry(self, rng, input_shape):
        return jax.numpy.zeros(tuple(input_shape[:-1]) + (self.features,), self.param_dtype)

    @property
    def num_feature_axes(self) -> int:
        return 1
