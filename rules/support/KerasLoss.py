"""Keras' ``keras.losses.Loss`` as the base of a user's loss class.

A subclass defines ``call(y_true, y_pred)`` (per-sample losses); calling the object runs it
and reduces the result as Keras' ``Loss.__call__`` does (``keras_reduce_loss``:
``reduction="sum_over_batch_size"`` by default; legacy Keras' ``"auto"`` is the same). The
constructor takes Keras' ``name``, ``reduction`` and ``dtype``. Keras 3 also casts both
inputs to the loss dtype before ``call``; this base only makes arrays of them (both Kerases
take Python lists: tf_keras through TF's ops, Keras 3 by converting), so integer labels
stay integers, as in legacy Keras. Translations import it from the package's generated
support module.
"""

import jax

from .keras_reduce_loss import keras_reduce_loss


class KerasLoss:
    """``loss(y_true, y_pred, sample_weight=None)``: the subclass's ``call``, weighted and reduced as in Keras."""

    def __init__(self, name=None, reduction="sum_over_batch_size", dtype=None):
        self.name = name
        self.reduction = "sum_over_batch_size" if reduction == "auto" else reduction
        self.dtype = dtype

    def __call__(self, y_true, y_pred, sample_weight=None):
        y_true, y_pred = (v if isinstance(v, dict) else jax.numpy.asarray(v) for v in (y_true, y_pred))
        return keras_reduce_loss(self.call(y_true, y_pred), sample_weight, self.reduction)

    def call(self, y_true, y_pred):
        raise NotImplementedError("a KerasLoss subclass defines call(y_true, y_pred)")

    def get_config(self):
        return {"name": self.name, "reduction": self.reduction}
