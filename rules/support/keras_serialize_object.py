"""``keras.utils.serialize_keras_object(obj)`` (and ``keras.optimizers.schedules.serialize``)
for a translated object: its class and its config.

Keras writes the class name and ``get_config()``; ``deserialize`` finds the class again
through its registry, which translations do without. Here the class object itself is kept
beside the config, so ``keras_deserialize_object`` rebuilds an equal object with no lookup.
A translated layer (a Flax module) has its fields as its config; any other object (a custom
schedule, loss or metric class the translation keeps) its own ``get_config()``. The result
is a dict, as Keras', but not JSON: writing it to a file fails (json raises on the class),
never silently.
"""

import flax.linen

from .keras_layer_config import keras_layer_config


def keras_serialize_object(obj):
    """``{"class_name", "config", "object_class"}`` of a translated object."""
    if isinstance(obj, flax.linen.Module):
        config = keras_layer_config(obj)
    elif callable(getattr(obj, "get_config", None)):
        config = obj.get_config()
    else:
        raise TypeError(f"cannot serialize {type(obj).__name__}: only a translated layer or an object with "
                        "get_config() has a config here (a translated built-in schedule is a plain function)")
    return {"class_name": type(obj).__name__, "config": config, "object_class": type(obj)}
