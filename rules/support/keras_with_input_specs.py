"""A ``keras.Sequential`` declared with ``keras.Input`` knows its input before any call.

Keras builds such a model at construction: its weights exist (and can be read, trained or
saved) before it sees data. ``flax.linen.Sequential`` infers shapes at ``init`` from an
example input, so the translation records the Input's ``(shape, dtype)`` on the module as
``tern_input_specs``, the attribute tern's test runtime and trainer build a module from
(as a translated functional model's class attribute). ``Module`` instances are frozen
dataclasses: the attribute is set past their ``__setattr__``, and is not a field (clones
made by ``apply`` do not need it).

Translations import it from the package's generated support module.
"""


def keras_with_input_specs(module, specs):
    """``module`` with ``tern_input_specs = specs`` (``(shape, dtype)`` of the model's Input)."""
    object.__setattr__(module, "tern_input_specs", specs)
    return module
