"""Models the step trains: a plain MLP, one with batch normalization, one with dropout."""

import tensorflow as tf


def make_mlp(num_features=3, hidden_units=8, num_classes=2):
    inputs = tf.keras.Input(shape=(num_features,))
    x = tf.keras.layers.Dense(hidden_units, activation="tanh")(inputs)
    logits = tf.keras.layers.Dense(num_classes)(x)
    return tf.keras.Model(inputs, logits)


def make_bn_mlp(num_features=3, hidden_units=8, num_classes=2):
    inputs = tf.keras.Input(shape=(num_features,))
    x = tf.keras.layers.Dense(hidden_units)(inputs)
    x = tf.keras.layers.BatchNormalization()(x)
    x = tf.keras.layers.Activation("tanh")(x)
    logits = tf.keras.layers.Dense(num_classes)(x)
    return tf.keras.Model(inputs, logits)


def make_dropout_mlp(num_features=3, hidden_units=8, num_classes=2, rate=0.5):
    inputs = tf.keras.Input(shape=(num_features,))
    x = tf.keras.layers.Dense(hidden_units, activation="tanh")(inputs)
    x = tf.keras.layers.Dropout(rate)(x)
    logits = tf.keras.layers.Dense(num_classes)(x)
    return tf.keras.Model(inputs, logits)
