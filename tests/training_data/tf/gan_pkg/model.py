"""A generator and a critic small enough to train in a test."""

import tensorflow as tf


def make_generator(latent_dim=2, data_dim=2):
    return tf.keras.Sequential([tf.keras.Input((latent_dim,)), tf.keras.layers.Dense(8),
                                tf.keras.layers.LeakyReLU(negative_slope=0.2), tf.keras.layers.Dense(data_dim)])


def make_critic(data_dim=2):
    return tf.keras.Sequential([tf.keras.Input((data_dim,)), tf.keras.layers.Dense(8),
                                tf.keras.layers.LeakyReLU(negative_slope=0.2), tf.keras.layers.Dense(1)])
