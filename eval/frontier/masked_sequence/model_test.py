"""Tests for masked_sequence.model."""

import numpy as np
import tensorflow as tf

from masked_sequence.model import MaskedMean, SequenceClassifier


class MaskedSequenceTest(tf.test.TestCase):

    def test_masked_mean_ignores_masked_steps(self):
        x = np.arange(12, dtype="float32").reshape(1, 4, 3)
        mask = np.array([[True, True, False, False]])
        self.assertAllClose(MaskedMean()(x, mask=mask), x[:, :2].mean(1))

    def test_padding_does_not_change_the_logits(self):
        tf.keras.utils.set_random_seed(4)
        model = SequenceClassifier()
        short = np.array([[3, 5, 7]], "int32")
        padded = np.array([[3, 5, 7, 0, 0]], "int32")
        self.assertAllClose(model(short), model(padded), rtol=1e-5, atol=1e-5)
