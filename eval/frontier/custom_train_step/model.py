"""`train_step` overridden with a GradientTape; `fit` drives it."""

import tensorflow as tf


class RegressionModel(tf.keras.Model):
    """Two Dense layers, mean squared error, a loss tracker updated per step."""

    def __init__(self, hidden=8, **kwargs):
        super().__init__(**kwargs)
        self.hidden = tf.keras.layers.Dense(hidden, activation="tanh")
        self.head = tf.keras.layers.Dense(1)
        self.loss_tracker = tf.keras.metrics.Mean(name="loss")

    def call(self, inputs, training=False):
        return self.head(self.hidden(inputs))

    @property
    def metrics(self):
        return [self.loss_tracker]

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            prediction = self(x, training=True)
            loss = tf.reduce_mean(tf.square(prediction - y))
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}


def make_model(hidden=8, learning_rate=0.05):
    model = RegressionModel(hidden=hidden)
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=learning_rate))
    return model
