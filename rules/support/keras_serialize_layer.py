"""``keras.layers.serialize(layer)`` for a Flax module: its class and its config.

Keras writes the class name and ``get_config()``, and ``deserialize`` finds the class again
through its registry (``register_keras_serializable``, which translations drop). Here the
class object itself is kept next to the config, so ``keras_deserialize_layer`` rebuilds an
equal, unbound module without a registry. The result is a dict, as Keras', but not JSON:
writing it to a file fails (json raises on the class), never silently.
"""

from .keras_layer_config import keras_layer_config


def keras_serialize_layer(layer):
    """``{"class_name", "config", "module_class"}`` of a translated layer."""
    return {"class_name": type(layer).__name__, "config": keras_layer_config(layer), "module_class": type(layer)}
