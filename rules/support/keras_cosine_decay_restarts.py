"""Keras' ``CosineDecayRestarts`` (SGDR) as an optax schedule.

``optax.sgdr_schedule`` takes a finite list of periods; Keras restarts forever, each period
``t_mul`` times longer and ``m_mul`` times lower than the last
(keras/src/optimizers/schedules/learning_rate_schedule.py). This is Keras' formula in
``jax.numpy``, called with the step count as optax schedules are. Translations import it from the package's generated support module.
"""

import math

import jax


def keras_cosine_decay_restarts(initial_learning_rate, first_decay_steps, t_mul=2.0, m_mul=1.0, alpha=0.0):
    """The schedule ``count -> learning rate`` of ``keras.optimizers.schedules.CosineDecayRestarts``."""

    def schedule(count):
        fraction = jax.numpy.asarray(count, jax.numpy.float32) / first_decay_steps
        if t_mul == 1.0:
            restart = jax.numpy.floor(fraction)
            fraction = fraction - restart
        else:
            restart = jax.numpy.floor(jax.numpy.log(1.0 - fraction * (1.0 - t_mul)) / jax.numpy.log(t_mul))
            done = (1.0 - t_mul ** restart) / (1.0 - t_mul)
            fraction = (fraction - done) / t_mul ** restart
        cosine = 0.5 * m_mul ** restart * (1.0 + jax.numpy.cos(math.pi * fraction))
        return initial_learning_rate * ((1 - alpha) * cosine + alpha)

    return schedule
