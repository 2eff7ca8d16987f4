"""A generator and a critic small enough to train in a test."""
import flax.linen as nn
import jax


def make_generator(latent_dim=2, data_dim=2):
    return nn.Sequential([nn.Dense(8, kernel_init=nn.initializers.glorot_uniform()),
                          lambda inputs: jax.nn.leaky_relu(inputs, negative_slope=0.2),
                          nn.Dense(data_dim, kernel_init=nn.initializers.glorot_uniform())])


def make_critic(data_dim=2):
    return nn.Sequential([nn.Dense(8, kernel_init=nn.initializers.glorot_uniform()),
                          lambda inputs: jax.nn.leaky_relu(inputs, negative_slope=0.2),
                          nn.Dense(1, kernel_init=nn.initializers.glorot_uniform())])
