"""``self.add_loss(value)`` of a Keras layer, for a Flax module: a term in ``losses``.

Keras keeps the loss terms of a layer's last call in ``layer.losses`` (cleared at every
top-level call). A Flax module sows each term into the ``losses`` collection under its own
name. The reduce *replaces* the stored value (flax's default appends to a tuple): an apply
whose input variables already hold ``losses`` from an earlier pass (a train state carries
its collections from step to step) then records this pass's terms, never stale ones. The
price: a module instance called twice in one pass keeps only its last term under that name.
``sow`` does nothing when ``losses`` is not mutable (inference applies), and returns False.
Translations import it from the package's generated support module.
"""


def keras_add_loss(module, name, value):
    """Record ``value`` (an array, or a pytree of them: one term per leaf) as this pass's loss term ``name``."""
    return module.sow("losses", name, value, reduce_fn=lambda previous, new: new)
