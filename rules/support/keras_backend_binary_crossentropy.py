"""Legacy ``keras.backend.binary_crossentropy(target, output)``: element-wise, no mean.

Unlike the loss function ``keras.losses.binary_crossentropy`` (``keras_binary_crossentropy``),
the backend helper keeps every element, and for probabilities it clips to
``[epsilon, 1 - epsilon]`` and then adds ``epsilon`` again inside both logs (tf_keras'
backend.py and Keras 3's legacy backend, with Keras' default epsilon 1e-7). In graph mode
Keras reads the logits behind a ``sigmoid`` op instead; eagerly, as here, it clips.
Translations import it from the package's generated support module.
"""

import jax
import optax


def keras_backend_binary_crossentropy(target, output, from_logits=False):
    """Element-wise binary cross-entropy, as ``keras.backend.binary_crossentropy``."""
    output = jax.numpy.asarray(output)
    target = jax.numpy.asarray(target).astype(output.dtype)
    if from_logits:
        return optax.sigmoid_binary_cross_entropy(output, target)
    epsilon = 1e-7
    output = jax.numpy.clip(output, epsilon, 1.0 - epsilon)
    return -(target * jax.numpy.log(output + epsilon) + (1 - target) * jax.numpy.log(1 - output + epsilon))
