"""Keras' weight order (``model.get_weights()``) over a Flax variables tree.

Keras lists a model's weights layer by layer in the order the layers were created, each
layer's trainable weights before its moving statistics (a BatchNormalization gives gamma,
beta, moving mean, moving variance). A Flax variables tree from ``init`` keeps creation
order in its dicts, one collection at a time (``params``, then ``batch_stats``); grouping
the leaves by module path, in order of first appearance, gives Keras' order where the
layouts agree (the weight maps of rules/layers say where they do not: an LSTM's kernel is
split per gate). A tree that went through ``jax.tree_util`` (an optimizer update) has its
keys sorted instead, so the order is taken once, from the first tree seen, and kept.
Translations import it from the package's generated support module.
"""


def keras_weight_order(variables):
    """Leaf paths ``(collection, *module path, name)`` of ``variables`` in Keras' weight order."""
    layers = {}

    def walk(path, node):
        for key, value in node.items():
            if hasattr(value, "items"):
                walk((*path, key), value)
            else:
                layers.setdefault(path[1:], []).append((*path, key))

    for collection, tree in variables.items():
        walk((collection,), tree)
    return [p for paths in layers.values() for p in paths]
