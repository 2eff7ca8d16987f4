"""Tests for ragged_features.ops."""

import numpy as np
import tensorflow as tf

from ragged_features.ops import EmbeddingBag, ragged_row_means


class RaggedTest(tf.test.TestCase):

    def test_row_means(self):
        values = np.arange(6, dtype="float32")
        means = ragged_row_means(values, np.array([2, 0, 4], "int64"))
        self.assertAllClose(means, [0.5, 0.0, 3.5])

    def test_embedding_bag(self):
        tf.keras.utils.set_random_seed(2)
        layer = EmbeddingBag(vocab_size=10, dim=3)
        ids = np.array([1, 2, 3, 4, 5], "int32")
        out = layer(ids, np.array([3, 2], "int64")).numpy()
        table = layer.table.numpy()
        self.assertAllClose(out[0], table[[1, 2, 3]].mean(0))
        self.assertAllClose(out[1], table[[4, 5]].mean(0))
