"""Keras' ``keras.losses.poisson`` per-sample loss in ``jax.numpy``.

``mean(y_pred - y_true * log(y_pred + 1e-7), axis=-1)``: Keras' form, with its epsilon
inside the log (``optax.poisson_nll`` works on log-rates).
Used by the function ``keras.losses.poisson`` and, through ``keras_loss``, by the class
``keras.losses.Poisson``. Translations import it from the package's generated support module.
"""

import jax


def keras_poisson(y_true, y_pred):
    """``mean(y_pred - y_true * log(y_pred + 1e-7), axis=-1)``."""
    y_pred = jax.numpy.asarray(y_pred)
    y_true = jax.numpy.asarray(y_true, y_pred.dtype)
    return jax.numpy.mean(y_pred - y_true * jax.numpy.log(y_pred + 1e-7), axis=-1)
