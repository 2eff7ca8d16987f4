"""Models the step trains: a plain MLP, one with batch normalization, one with dropout."""
import flax.linen as nn
import jax.numpy as jnp


def make_mlp(num_features=3, hidden_units=8, num_classes=2):
    class Mlp(nn.Module):
        """Functional Keras model `make_mlp`, replayed as a Flax module."""
        tern_input_specs = ((num_features,), "float32")
        @nn.compact
        def __call__(self, inputs, training: bool = False):
            x = nn.Sequential([nn.Dense(hidden_units, kernel_init=nn.initializers.glorot_uniform()), jnp.tanh])(inputs)
            logits = nn.Dense(num_classes, kernel_init=nn.initializers.glorot_uniform())(x)
            return logits
    return Mlp()


def make_bn_mlp(num_features=3, hidden_units=8, num_classes=2):
    class BnMlp(nn.Module):
        """Functional Keras model `make_bn_mlp`, replayed as a Flax module."""
        tern_input_specs = ((num_features,), "float32")
        @nn.compact
        def __call__(self, inputs, training: bool = False):
            x = nn.Dense(hidden_units, kernel_init=nn.initializers.glorot_uniform())(inputs)
            x = nn.BatchNorm(epsilon=0.001)(x, use_running_average=not training)
            x = jnp.tanh(x)
            logits = nn.Dense(num_classes, kernel_init=nn.initializers.glorot_uniform())(x)
            return logits
    return BnMlp()


def make_dropout_mlp(num_features=3, hidden_units=8, num_classes=2, rate=0.5):
    class DropoutMlp(nn.Module):
        """Functional Keras model `make_dropout_mlp`, replayed as a Flax module."""
        tern_input_specs = ((num_features,), "float32")
        @nn.compact
        def __call__(self, inputs, training: bool = False):
            x = nn.Sequential([nn.Dense(hidden_units, kernel_init=nn.initializers.glorot_uniform()), jnp.tanh])(inputs)
            x = nn.Dropout(rate)(x, deterministic=not training)
            logits = nn.Dense(num_classes, kernel_init=nn.initializers.glorot_uniform())(x)
            return logits
    return DropoutMlp()
