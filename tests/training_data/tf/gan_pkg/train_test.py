import numpy as np
import tensorflow as tf

from gan_pkg.model import make_critic, make_generator
from gan_pkg.train import train_step


def test_steps_move_both_networks():
    tf.keras.utils.set_random_seed(0)
    generator, critic = make_generator(), make_critic()
    g_opt, c_opt = tf.keras.optimizers.Adam(1e-2, beta_1=0.5), tf.keras.optimizers.Adam(1e-2, beta_1=0.5)
    real = np.random.default_rng(0).normal(2.0, 0.1, (8, 2)).astype("float32")
    before = [w.copy() for w in generator.get_weights() + critic.get_weights()]
    for _ in range(2):
        logs = train_step(generator, critic, g_opt, c_opt, real)
    assert all(np.isfinite(float(v)) for v in logs.values())
    assert int(g_opt.iterations) == int(c_opt.iterations) == 2
    assert not any(np.allclose(a, b) for a, b in zip(before, generator.get_weights() + critic.get_weights())
                   if a.ndim == 2)
