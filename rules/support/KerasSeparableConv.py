"""Keras' ``SeparableConv1D/2D``: a depthwise convolution, then a pointwise (1x1) one with the bias.

Flax has no separable convolution. This module makes the two parts as named submodules,
``layers_0`` (``KerasDepthwiseConv``: channels read from the input) and ``layers_1``
(``flax.linen.Conv`` with a window of ones), so the variable tree is the same wherever the layer is
made: an ``flax.linen.Sequential`` of the two made inside a compact method would hand its layers
to that method's module instead. Translations import it from the package's generated
support module.
"""

from typing import Any, Callable, Sequence

import flax.linen

from .KerasDepthwiseConv import KerasDepthwiseConv


class KerasSeparableConv(flax.linen.Module):
    """Depthwise (no bias) then pointwise convolution, as Keras' separable convolutions."""

    features: int
    kernel_size: Sequence[int]
    strides: Sequence[int] | None = None
    padding: Any = "VALID"
    depth_multiplier: int = 1
    kernel_dilation: Sequence[int] | None = None
    use_bias: bool = True
    depthwise_init: Callable = flax.linen.initializers.glorot_uniform()
    pointwise_init: Callable = flax.linen.initializers.glorot_uniform()
    bias_init: Callable = flax.linen.initializers.zeros_init()

    @flax.linen.compact
    def __call__(self, inputs):
        x = KerasDepthwiseConv(self.kernel_size, strides=self.strides, padding=self.padding,
                               depth_multiplier=self.depth_multiplier, kernel_dilation=self.kernel_dilation,
                               use_bias=False, kernel_init=self.depthwise_init, name="layers_0")(inputs)
        return flax.linen.Conv(self.features, (1,) * len(self.kernel_size), use_bias=self.use_bias,
                       kernel_init=self.pointwise_init, bias_init=self.bias_init, name="layers_1")(x)
