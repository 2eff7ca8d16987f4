"""An LSTM cell with exactly Keras' parametrization, for ``flax.linen.RNN``.

flax.linen.LSTMCell keeps one Dense per gate (8 kernels, 4 biases) and initializes every
gate bias alike; Keras ``LSTMCell`` keeps three fused variables: ``kernel`` (in, 4u),
``recurrent_kernel`` (u, 4u) and ``bias`` (4u,), gates in the order i, f, c, o, with the
forget-gate bias starting at 1 (``unit_forget_bias=True``, the default). This cell has
those three params under those names, so variable counts, checkpoints and the
initialization agree with Keras (keras/src/layers/rnn/lstm.py, ``build`` and ``call``).

An initializer of None is what Keras' ``add_weight(initializer=None)`` does: glorot_uniform
(so ``recurrent_initializer=None`` is glorot_uniform, not orthogonal; a 1-D bias has fans (n, n)).

The carry is Keras' state list as a tuple, ``(h, c)`` (flax LSTMCell carries ``(c, h)``).
Translations import it from the package's generated support module
(``{support:KerasLSTMCell}`` in a template).
"""

import typing

import flax.linen
import jax


class KerasLSTMCell(flax.linen.RNNCellBase):
    """Keras ``LSTMCell``: params ``kernel``, ``recurrent_kernel``, ``bias`` (gates i, f, c, o); carry ``(h, c)``."""

    features: int
    activation: typing.Callable[..., typing.Any] = jax.numpy.tanh
    recurrent_activation: typing.Callable[..., typing.Any] = jax.nn.sigmoid
    use_bias: bool = True
    kernel_init: typing.Callable[..., typing.Any] | None = flax.linen.initializers.glorot_uniform()
    recurrent_kernel_init: typing.Callable[..., typing.Any] | None = flax.linen.initializers.orthogonal()
    bias_init: typing.Callable[..., typing.Any] | None = flax.linen.initializers.zeros_init()
    unit_forget_bias: bool = True
    param_dtype: typing.Any = jax.numpy.float32

    @flax.linen.compact
    def __call__(self, carry, inputs):
        h, c = carry
        units = self.features
        kernel = self.param("kernel", self.kernel_init or self.keras_default_init, (inputs.shape[-1], 4 * units), self.param_dtype)
        recurrent_kernel = self.param("recurrent_kernel", self.recurrent_kernel_init or self.keras_default_init, (units, 4 * units), self.param_dtype)
        z = inputs @ kernel + h @ recurrent_kernel
        if self.use_bias:

            def bias_init(key, shape, dtype):
                init = self.bias_init or self.keras_default_init
                if not self.unit_forget_bias:
                    return init(key, shape, dtype)
                # Keras: bias_initializer for i, ones for f, bias_initializer for c and o
                key_i, key_co = jax.random.split(key)
                return jax.numpy.concatenate([
                    init(key_i, (units,), dtype),
                    jax.numpy.ones((units,), dtype),
                    init(key_co, (2 * units,), dtype),
                ])

            z = z + self.param("bias", bias_init, (4 * units,), self.param_dtype)
        z_i, z_f, z_c, z_o = jax.numpy.split(z, 4, axis=-1)
        i = self.recurrent_activation(z_i)
        f = self.recurrent_activation(z_f)
        c = f * c + i * self.activation(z_c)
        o = self.recurrent_activation(z_o)
        h = o * self.activation(c)
        return (h, c), h

    @staticmethod
    def keras_default_init(key, shape, dtype):
        """Keras ``add_weight(initializer=None)``: glorot_uniform, a 1-D shape ``(n,)`` with fans ``(n, n)``."""
        if len(shape) == 1:
            return flax.linen.initializers.glorot_uniform()(key, (shape[0], shape[0]), dtype)[0]
        return flax.linen.initializers.glorot_uniform()(key, shape, dtype)

    @flax.linen.nowrap
    def initialize_carry(self, rng, input_shape):
        shape = tuple(input_shape[:-1]) + (self.features,)
        return jax.numpy.zeros(shape, self.param_dtype), jax.numpy.zeros(shape, self.param_dtype)

    @property
    def num_feature_axes(self) -> int:
        return 1
