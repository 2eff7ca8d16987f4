"""Keras' ``model.losses`` / ``layer.losses`` from the Flax collections of a forward pass.

The translated modules sow every regularization term (weight penalties, activity
penalties, ``add_loss``) into the ``losses`` collection (``keras_add_loss``); a pass applied
with ``mutable=[..., "losses"]`` returns them with the other updated collections. This is
the list of those terms: its sum is Keras' ``sum(model.losses)``; names and order differ
from Keras', the number of terms does not. Translations import it from the package's generated support module.
"""

import jax


def keras_model_losses(collections):
    """The loss terms in ``collections["losses"]`` as a list (empty without that collection)."""
    return jax.tree_util.tree_leaves(collections.get("losses", {}))
