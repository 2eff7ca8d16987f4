"""``layer.get_config()`` for a Flax module: its constructor arguments, by name.

A Keras layer's config is what its constructor takes (``cls.from_config(config)`` is
``cls(**config)`` unless a layer overrides it); a translated layer is a Flax module, a
dataclass whose fields are the Keras constructor's parameters, so the fields (and the
module's ``name``) are its config. Values are as the translation holds them (an initializer
field keeps the name it was given, not Keras' serialized dict), so two configs compare equal
exactly when the modules were built alike, which is what tests check with it.
"""

import dataclasses

import flax.linen


def keras_layer_config(module):
    """The module's constructor arguments as a dict (no ``parent``)."""
    if not isinstance(module, flax.linen.Module):
        raise TypeError(f"get_config of {type(module).__name__}: only a translated layer (a flax.linen.Module) has a config here")
    return {f.name: getattr(module, f.name) for f in dataclasses.fields(module) if f.name != "parent"}
