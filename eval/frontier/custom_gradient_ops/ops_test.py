"""Tests for custom_gradient_ops.ops."""

import numpy as np
import tensorflow as tf

from custom_gradient_ops.ops import ClippedDense, clip_gradient, log1pexp


class CustomGradientTest(tf.test.TestCase):

    def test_clip_gradient(self):
        x = tf.constant([1.0, 2.0, 3.0])
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(clip_gradient(x) * 5.0)
        self.assertAllClose(tape.gradient(y, x), [1.0, 1.0, 1.0])

    def test_log1pexp_is_stable(self):
        x = tf.constant([-100.0, 0.0, 100.0])
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = log1pexp(x)
        self.assertAllClose(y, [0.0, np.log(2.0), 100.0], atol=1e-6)
        self.assertAllClose(tape.gradient(y, x), [0.0, 0.5, 1.0], atol=1e-6)

    def test_layer(self):
        tf.keras.utils.set_random_seed(3)
        x = np.random.default_rng(3).normal(size=(4, 5)).astype("float32")
        layer = ClippedDense(units=3)
        y = layer(x)
        self.assertEqual(y.shape, (4, 3))
        self.assertTrue(np.all(y.numpy() > 0))
