"""A Keras layer's regularizers, for a Flax module that cannot record them itself.

Keras adds to ``layer.losses``, at every call, ``regularizer(variable)`` for each
regularized trainable variable (``kernel_regularizer=``...: the *current* values) and
``activity_regularizer(output)`` for each tensor the call returns, divided by the output's
batch size (``keras.ops.divide_no_nan``, keras/src/layers/layer.py ``__call__``), after the
layer's own fused activation. This wrapper calls the flax layer, applies the activation,
and sows those terms (``keras_add_loss``) computed from the params that very pass used, so
gradients flow through them. ``weight_regularizers`` pairs a param path inside the layer's
``params`` with its regularizer; a param the layer did not create (``use_bias=False``) has
no term, as in Keras, and so does a regularizer that is None at run time
(``kernel_regularizer=self._kernel_regularizer``). A ``training`` argument the layer does not take is dropped, as Keras
ignores it for such a layer (nn.Sequential and train states pass it on). Translations import it from the package's generated support module
(``{support:KerasRegularized}`` in a template).
"""

import inspect
import typing

import flax.linen
import jax

from .keras_add_loss import keras_add_loss


class KerasRegularized(flax.linen.Module):
    """``layer`` (then ``activation``), recording its Keras weight and activity penalties in ``losses``."""

    layer: typing.Any
    activation: typing.Callable[..., typing.Any] | None = None
    weight_regularizers: tuple = ()
    activity_regularizer: typing.Callable[..., typing.Any] | None = None

    @flax.linen.compact
    def __call__(self, *args, **kwargs):
        if "training" in kwargs and "training" not in inspect.signature(type(self.layer).__call__).parameters:
            del kwargs["training"]  # Keras passes it to every layer; one without it ignores it (nn.Dense)
        outputs = self.layer(*args, **kwargs)
        if self.activation is not None:
            outputs = self.activation(outputs)
        params = self.layer.variables.get("params", {})
        for path, regularizer in self.weight_regularizers:
            if regularizer is None:
                continue  # a regularizer argument that is None at run time: none, as in Keras
            weight = params
            for key in path.split("/"):
                weight = weight.get(key) if hasattr(weight, "get") else None
            if weight is not None:
                keras_add_loss(self, path.replace("/", "_") + "_regularizer", regularizer(weight))
        if self.activity_regularizer is not None:
            arrays = [o for o in jax.tree_util.tree_leaves(outputs) if isinstance(o, jax.Array)]
            for i, output in enumerate(arrays):
                loss = self.activity_regularizer(output)
                if output.ndim > 0:  # Keras: divide_no_nan(loss, batch size)
                    batch = output.shape[0]
                    loss = loss / jax.numpy.asarray(batch, loss.dtype) if batch else jax.numpy.zeros_like(loss)
                keras_add_loss(self, "activity_regularizer" + (f"_{i}" if i else ""), loss)
        return outputs
