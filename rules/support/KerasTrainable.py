"""Keras' ``layer.trainable`` flags of a translated model, kept beside its Flax module.

A Flax module is an immutable description; the flags a Keras user sets on a model's layers
(``layer.trainable = False`` to fine-tune a head) live in this table, attached to the module
object as ``KerasTrainer.of`` attaches the trainer, and shared by every caller. Keras'
setter is recursive (keras/src/layers/layer.py: the layer, each sublayer and each variable
take the value), so the newest assignment to a layer or to a layer containing it decides;
a model that is itself not trainable has no trainable variables at all.

Keras' optimizer only ever sees ``model.trainable_variables``: a frozen variable gets no
update, no weight decay and no slots. ``optimizer(tx, variables)`` is that optax
transformation: ``optax.multi_transform`` sending the frozen params to
``optax.set_to_zero()`` (the inner ``tx``, with its clipping and decay, sees the trainable
ones only). Keras runs a frozen BatchNormalization in inference mode; that is not
reproduced, so moving statistics under a frozen layer are refused.
Translations import it from the package's generated support module.
"""

import jax
import optax


class KerasTrainable:
    """The ``trainable`` flags set on a module's layers (paths of Flax submodule names), oldest first."""

    def __init__(self):
        self.flags = {}

    @classmethod
    def of(cls, module, create=True):
        """The table attached to ``module`` (a new, empty one on first use when ``create``)."""
        table = module.__dict__.get("_keras_trainable")
        if table is None and create:
            table = cls()
            object.__setattr__(module, "_keras_trainable", table)
        return table

    def set(self, path, value):
        path = tuple(path)
        self.flags.pop(path, None)
        self.flags[path] = bool(value)

    def get(self, path):
        """Keras' ``layer.trainable`` for the layer at ``path``: the newest flag set on it or on a layer containing it."""
        path = tuple(path)
        value = True
        for prefix, flag in self.flags.items():
            if path[:len(prefix)] == prefix:
                value = flag
        return value

    def variable(self, path, root=()):
        """Whether the variable at ``path`` (module path, then its name) is among ``trainable_variables`` of the layer at ``root``."""
        return self.get(root) and self.get(tuple(path)[:-1])

    def mask(self, params, root=()):
        """A tree of bools shaped like ``params`` (the subtree of the layer at ``root``): True where trainable."""
        return jax.tree_util.tree_map_with_path(
            lambda path, _: self.variable((*root, *(k.key for k in path)), root), params)

    def frozen(self, params):
        """Paths (Flax keys) of the params Keras does not train."""
        return frozenset(tuple(k.key for k in path) for path, trainable
                         in jax.tree_util.tree_leaves_with_path(self.mask(params)) if not trainable)

    def optimizer(self, tx, variables):
        """``tx`` applied to the trainable params only; frozen ones are left exactly as they are."""
        for collection, tree in variables.items():
            if collection in ("params", "losses"):
                continue
            for path, _ in jax.tree_util.tree_leaves_with_path(tree):
                if not self.variable(tuple(k.key for k in path)):
                    raise NotImplementedError(
                        f"a frozen layer holds {collection} at {'/'.join(str(k.key) for k in path)}: Keras runs a "
                        "non-trainable BatchNormalization in inference mode, which the translation does not reproduce")
        mask = self.mask(variables.get("params", {}))
        if all(jax.tree_util.tree_leaves(mask)):
            return tx
        labels = jax.tree_util.tree_map(lambda trainable: "trainable" if trainable else "frozen", mask)
        return optax.multi_transform({"trainable": tx, "frozen": optax.set_to_zero()}, labels)
