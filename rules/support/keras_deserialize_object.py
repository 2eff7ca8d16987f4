"""``keras.utils.deserialize_keras_object(config)`` (and ``keras.optimizers.schedules.deserialize``)
of what ``keras_serialize_object`` gave: an equal object again.

Keras looks the class up by name and calls its ``from_config(config)`` (``cls(**config)`` by
default); the serialized dict here carries the class, so no lookup and no ``custom_objects``.
A Keras config read from elsewhere (JSON, no class object) raises a KeyError.
"""


def keras_deserialize_object(config):
    """A new object of the recorded class, from ``config["config"]``."""
    cls = config["object_class"]
    from_config = getattr(cls, "from_config", None)
    return from_config(config["config"]) if callable(from_config) else cls(**config["config"])
