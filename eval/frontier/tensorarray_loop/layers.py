"""h_t = tanh(x_t W + h_{t-1} U + b), every h_t written to a TensorArray."""

import tensorflow as tf


class ElmanRecurrence(tf.keras.layers.Layer):

    def __init__(self, units=4, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, input_shape):
        self.kernel = self.add_weight(name="kernel", shape=(input_shape[-1], self.units), initializer="glorot_uniform")
        self.recurrent = self.add_weight(name="recurrent", shape=(self.units, self.units), initializer="orthogonal")
        self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="zeros")

    def call(self, inputs):
        steps = tf.shape(inputs)[1]
        time_major = tf.transpose(inputs, [1, 0, 2])
        outputs = tf.TensorArray(inputs.dtype, size=steps)
        state = tf.zeros([tf.shape(inputs)[0], self.units], dtype=inputs.dtype)

        def body(t, state, outputs):
            state = tf.tanh(tf.matmul(time_major[t], self.kernel) + tf.matmul(state, self.recurrent) + self.bias)
            return t + 1, state, outputs.write(t, state)

        _, _, outputs = tf.while_loop(lambda t, state, outputs: t < steps, body, (0, state, outputs))
        return tf.transpose(outputs.stack(), [1, 0, 2])
