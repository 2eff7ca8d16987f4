"""Padding (id 0) is masked by the Embedding; downstream layers receive the mask implicitly."""

import tensorflow as tf


class MaskedMean(tf.keras.layers.Layer):
    """Mean over the unmasked time steps; consumes the mask."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        if mask is None:
            return tf.reduce_mean(inputs, axis=1)
        weights = tf.cast(mask, inputs.dtype)[:, :, tf.newaxis]
        return tf.reduce_sum(inputs * weights, axis=1) / tf.maximum(tf.reduce_sum(weights, axis=1), 1.0)

    def compute_mask(self, inputs, mask=None):
        return None


class SequenceClassifier(tf.keras.Model):

    def __init__(self, vocab_size=20, dim=8, units=6, classes=3, **kwargs):
        super().__init__(**kwargs)
        self.embedding = tf.keras.layers.Embedding(vocab_size, dim, mask_zero=True)
        self.lstm = tf.keras.layers.LSTM(units, return_sequences=True)
        self.pool = MaskedMean()
        self.head = tf.keras.layers.Dense(classes)

    def call(self, tokens):
        return self.head(self.pool(self.lstm(self.embedding(tokens))))
