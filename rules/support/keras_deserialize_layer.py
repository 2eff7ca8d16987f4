"""``keras.layers.deserialize(config)`` of what ``keras_serialize_layer`` gave: the same module again.

Keras looks the class up by name and calls ``from_config(config)``, ``cls(**config)`` by
default; the serialized dict here carries the class, so no lookup (and no ``custom_objects``)
is needed. A Keras config read from elsewhere (JSON, no class object) raises a KeyError.
"""


def keras_deserialize_layer(config):
    """A fresh, unbound module built from ``config["config"]`` with the recorded class."""
    return config["module_class"](**config["config"])
