"""The base of a translated custom ``keras.optimizers.schedules.LearningRateSchedule``.

A custom schedule subclasses Keras' base and overrides ``__call__(step)`` (and usually
``get_config``); its instances are passed to an optimizer as the learning rate. Translated,
the subclass derives from this class instead: an instance is then a plain callable of the
step count, which is what optax takes as a schedule (``optax.sgd(learning_rate=schedule)``;
optax calls it with its update count, 0 at the first update, as Keras calls it with
``iterations``), and the subclass keeps what Keras' base gives it: ``from_config`` is
``cls(**config)`` and the two methods a subclass must override raise as in Keras
(keras/src/optimizers/schedules/learning_rate_schedule.py). Under jit the step is traced:
the translated ``__call__`` computes with ``jax.numpy``, as the API tables write it.

Translations import it from the package's generated support module.
"""


class KerasLearningRateSchedule:
    """Keras' ``LearningRateSchedule`` base: a callable of the step count, serializable by config."""

    def __call__(self, step):
        raise NotImplementedError(f"Learning rate schedule '{self.__class__.__name__}' must override "
                                  "`__call__(self, step)`.")

    def get_config(self):
        raise NotImplementedError(f"Learning rate schedule '{self.__class__.__name__}' must override "
                                  "`get_config()` in order to be serializable.")

    @classmethod
    def from_config(cls, config):
        """Instantiates the schedule from the output of ``get_config()``."""
        return cls(**config)
