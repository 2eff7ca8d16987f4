"""Variable-length rows as tf.RaggedTensor."""

import tensorflow as tf


def ragged_row_means(values, row_lengths):
    """Mean of each row of a flat ``values`` split by ``row_lengths`` (empty rows: 0)."""
    rows = tf.RaggedTensor.from_row_lengths(values, row_lengths)
    sums = tf.reduce_sum(rows, axis=1)
    counts = tf.cast(tf.maximum(rows.row_lengths(), 1), values.dtype)
    return sums / counts


class EmbeddingBag(tf.keras.layers.Layer):
    """Embeds each id of a ragged batch and averages per row."""

    def __init__(self, vocab_size=16, dim=4, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.dim = dim

    def build(self, input_shape):
        self.table = self.add_weight(name="table", shape=(self.vocab_size, self.dim), initializer="uniform")

    def call(self, ids, row_lengths):
        rows = tf.RaggedTensor.from_row_lengths(ids, row_lengths)
        embedded = tf.ragged.map_flat_values(tf.nn.embedding_lookup, self.table, rows)
        return tf.reduce_mean(embedded, axis=1)
