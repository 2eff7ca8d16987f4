"""``x.__class__.from_config(x.get_config())``: Keras' way to get a fresh object like ``x``.

Keras code copies initializers this way before handing one to each sublayer (recommenders'
``_clone_initializer``), so that a seeded initializer object is not shared. In a translation
the object is a JAX initializer or activation (a function), a tern regularizer (a frozen,
hashable value) or a Flax module: stateless values are their own copy; a module gets
``clone()`` (a fresh unbound module with the same fields, as from_config gives an unbuilt
layer); any other object keeps Keras' protocol, and one without it fails there.
"""

import flax.linen


def keras_config_copy(obj):
    """A fresh object configured like ``obj``."""
    if isinstance(obj, flax.linen.Module):
        return obj.clone()
    if callable(obj) and not hasattr(obj, "get_config"):
        return obj  # a function or a frozen callable value: nothing to share
    return obj.__class__.from_config(obj.get_config())
