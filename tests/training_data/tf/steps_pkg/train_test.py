"""Tests of steps_pkg.train, each a case for the training-step verification."""

import numpy as np
import tensorflow as tf

from steps_pkg.model import make_bn_mlp, make_dropout_mlp, make_mlp
from steps_pkg.train import train, train_step


def _data(num_samples=32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((num_samples, 3)).astype("float32")
    y = (x[:, 0] + x[:, 1] - x[:, 2] > 0).astype("int32")
    return x, y


def _loss():
    return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def test_adam_steps_on_four_batches():
    tf.keras.utils.set_random_seed(0)
    model, optimizer = make_mlp(), tf.keras.optimizers.Adam(learning_rate=0.05)
    optimizer.build(model.trainable_variables)  # a tf.function step creates no variables after its first trace
    x, y = _data()
    losses = [float(train_step(model, optimizer, _loss(), x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8])) for i in range(4)]
    assert all(np.isfinite(losses))
    assert int(optimizer.iterations) == 4


def test_sgd_momentum_through_the_loop_on_two_batches():
    tf.keras.utils.set_random_seed(1)
    model, optimizer = make_bn_mlp(), tf.keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
    optimizer.build(model.trainable_variables)
    x, y = _data(seed=1)
    losses = train(model, optimizer, _loss(), [(x[:8], y[:8]), (x[8:16], y[8:16])])
    assert len(losses) == 2
    assert int(optimizer.iterations) == 2


def test_dropout_model():
    tf.keras.utils.set_random_seed(2)
    model, optimizer = make_dropout_mlp(), tf.keras.optimizers.SGD(learning_rate=0.1)
    optimizer.build(model.trainable_variables)
    x, y = _data(seed=2)
    assert np.isfinite(float(train_step(model, optimizer, _loss(), x[:8], y[:8])))


def test_an_optimizer_that_already_stepped():
    tf.keras.utils.set_random_seed(3)
    model, optimizer = make_mlp(), tf.keras.optimizers.SGD(learning_rate=0.1)
    optimizer.apply_gradients(zip([tf.zeros_like(v) for v in model.trainable_variables], model.trainable_variables))
    x, y = _data(seed=3)
    train_step(model, optimizer, _loss(), x[:8], y[:8])
    assert int(optimizer.iterations) == 2
