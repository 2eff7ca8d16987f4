"""Tests for tensorarray_loop.layers."""

import numpy as np
import tensorflow as tf

from tensorarray_loop.layers import ElmanRecurrence


class ElmanRecurrenceTest(tf.test.TestCase):

    def setUp(self):
        super().setUp()
        tf.keras.utils.set_random_seed(1)
        self.x = np.random.default_rng(1).normal(size=(2, 5, 3)).astype("float32")

    def test_shape(self):
        self.assertEqual(ElmanRecurrence(units=4)(self.x).shape, (2, 5, 4))

    def test_matches_a_numpy_loop(self):
        layer = ElmanRecurrence(units=4)
        y = layer(self.x).numpy()
        w, u, b = (v.numpy() for v in (layer.kernel, layer.recurrent, layer.bias))
        h = np.zeros((2, 4), "float32")
        for t in range(5):
            h = np.tanh(self.x[:, t] @ w + h @ u + b)
            self.assertAllClose(y[:, t], h, rtol=1e-5, atol=1e-5)
