"""Keras' Nadam scaling, for an optax chain before ``optax.scale_by_learning_rate``.

Keras' Nadam (keras/src/optimizers/nadam.py) follows Dozat's momentum schedule
``u_t = beta_1 * (1 - 0.5 * 0.96 ** t)`` with the running product of the ``u_t``;
``optax.nadam`` is Adam with a Nesterov look-ahead at a constant ``beta_1``. The two differ
from the first step (measured after 5 steps at lr 0.1: 0.18 absolute, up to 65 times the
displacement), so this follows Keras. Translations import it from the package's generated support module.
"""

import jax
import optax


def scale_by_keras_nadam(beta_1=0.9, beta_2=0.999, epsilon=1e-7):
    """Keras' Nadam update without the learning rate.

    State: ``(count, u_product, m, v)``, ``u_product`` starting at 1 as in Keras.
    """

    def init_fn(params):
        zeros = optax.tree.zeros_like(params)
        return jax.numpy.zeros([], jax.numpy.int32), jax.numpy.ones([], jax.numpy.float32), zeros, zeros

    def update_fn(updates, state, params=None):
        del params
        count, u_product, m, v = state
        count = count + 1
        t = count.astype(jax.numpy.float32)
        u_t = beta_1 * (1.0 - 0.5 * 0.96 ** t)
        u_t_1 = beta_1 * (1.0 - 0.5 * 0.96 ** (t + 1))
        u_product = u_product * u_t
        u_product_next = u_product * u_t_1
        beta_2_power = beta_2 ** t
        m = jax.tree.map(lambda m, g: m + (g - m) * (1 - beta_1), m, updates)
        v = jax.tree.map(lambda v, g: v + (jax.numpy.square(g) - v) * (1 - beta_2), v, updates)

        def scale(g, m, v):
            m_hat = u_t_1 * m / (1 - u_product_next) + (1 - u_t) * g / (1 - u_product)
            v_hat = v / (1 - beta_2_power)
            return m_hat / (jax.numpy.sqrt(v_hat) + epsilon)

        return jax.tree.map(scale, updates, m, v), (count, u_product, m, v)

    return optax.GradientTransformation(init_fn, update_fn)
