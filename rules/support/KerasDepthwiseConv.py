"""Keras' ``DepthwiseConv1D/2D`` where the input's channel count is not known when it is made.

A depthwise convolution is a grouped ``flax.linen.Conv`` with ``feature_group_count`` = input
channels, which ``flax.linen.Conv`` needs as a constructor argument; a layer made in a helper or a
``Sequential`` list (``[DepthwiseConv2D(3), BatchNormalization()]``) has no input yet. This
module reads the channel count from its input. Its parameters are ``flax.linen.Conv``'s: ``kernel``
in the grouped layout ``(*window, 1, channels * depth_multiplier)`` and ``bias``, so Keras
weights port as for the ``flax.linen.Conv`` form. The kernel is drawn in Keras' own layout
``(*window, channels, depth_multiplier)`` and reshaped, so variance-scaling initializers see
Keras' fans. Translations import it from the package's generated support module.
"""

from typing import Any, Callable, Sequence

import flax.linen
import jax


class KerasDepthwiseConv(flax.linen.Module):
    """A depthwise convolution over the last axis, channels taken from the input."""

    kernel_size: Sequence[int]
    strides: Sequence[int] | None = None
    padding: Any = "VALID"
    depth_multiplier: int = 1
    kernel_dilation: Sequence[int] | None = None
    use_bias: bool = True
    kernel_init: Callable = flax.linen.initializers.glorot_uniform()
    bias_init: Callable = flax.linen.initializers.zeros_init()

    @flax.linen.compact
    def __call__(self, inputs):
        channels = inputs.shape[-1]
        window = tuple(self.kernel_size)
        keras_shape = (*window, channels, self.depth_multiplier)
        kernel = self.param("kernel", lambda key, shape: self.kernel_init(key, keras_shape).reshape(shape),
                            (*window, 1, channels * self.depth_multiplier))
        rank = inputs.ndim
        spatial = tuple(range(1, rank - 1))
        numbers = jax.lax.ConvDimensionNumbers(lhs_spec=(0, rank - 1, *spatial), rhs_spec=(rank - 1, rank - 2, *range(rank - 2)),
                                               out_spec=(0, rank - 1, *spatial))
        y = jax.lax.conv_general_dilated(inputs, kernel, tuple(self.strides or (1,) * len(window)), self.padding,
                                         rhs_dilation=self.kernel_dilation, dimension_numbers=numbers,
                                         feature_group_count=channels)
        if self.use_bias:
            y = y + self.param("bias", self.bias_init, (channels * self.depth_multiplier,))
        return y
