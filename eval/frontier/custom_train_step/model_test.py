"""Tests for custom_train_step.model."""

import numpy as np
import tensorflow as tf

from custom_train_step.model import RegressionModel, make_model


class RegressionModelTest(tf.test.TestCase):

    def setUp(self):
        super().setUp()
        tf.keras.utils.set_random_seed(0)
        rng = np.random.default_rng(0)
        self.x = rng.normal(size=(32, 3)).astype("float32")
        self.y = (self.x @ np.array([[1.0], [-2.0], [0.5]], "float32")).astype("float32")

    def test_forward_shape(self):
        model = RegressionModel(hidden=4)
        self.assertEqual(model(self.x).shape, (32, 1))

    def test_fit_lowers_the_loss(self):
        model = make_model()
        history = model.fit(self.x, self.y, batch_size=8, epochs=5, verbose=0)
        losses = history.history["loss"]
        self.assertLess(losses[-1], losses[0])
