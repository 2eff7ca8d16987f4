"""Keras' ``Sequential`` where ``flax.linen.Sequential`` cannot stand in: it passes the training flag.

Keras calls each layer of a Sequential with ``training`` when the layer's ``call`` takes it;
``flax.linen.Sequential`` calls each with the input only. So a Sequential holding BatchNorm or
Dropout, or the package's own blocks (``[ConvBlock(...), ConvBlock(...)]``), becomes this
module: BatchNorm and Dropout get Flax's spelling of the flag, a layer whose ``__call__`` takes
``training`` gets it, anything else is called on the input alone. Its submodules are
``layers_0``, ``layers_1``... as in ``flax.linen.Sequential``. Translations import it from the
package's generated support module.
"""

from typing import Any

import flax.linen

from .keras_call import keras_call


class KerasSequential(flax.linen.Module):
    """The layers in order, each given the training flag the way Keras gives it."""

    layers: tuple[Any, ...]

    @flax.linen.compact
    def __call__(self, inputs, training: bool = False):
        x = inputs
        for layer in self.layers:
            if isinstance(layer, flax.linen.BatchNorm):
                x = layer(x, use_running_average=not training)
            elif isinstance(layer, flax.linen.Dropout):
                x = layer(x, deterministic=not training)
            else:
                x = keras_call(layer, x, training=training)
        return x
