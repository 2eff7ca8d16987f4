"""A translated Keras optimizer: the optax transformation, carrying its Keras learning rate.

Keras code reads ``optimizer.learning_rate`` (to log it, to test a schedule); an optax
transformation is a pair of pure functions and keeps no such thing. Every translation of a
``keras.optimizers.X(...)`` (rules/api/optimizers.toml) is wrapped in this type, which IS
an optax ``GradientTransformationExtraArgs`` (same ``init``/``update``, usable wherever optax
or flax's TrainState takes one) and also remembers the learning rate it was given: a number
or a schedule (a callable of the step count, as optax calls it).

``learning_rate_at(iterations)`` is Keras' ``optimizer.learning_rate`` once ``iterations``
updates were applied: the rate the NEXT update uses, ``schedule(iterations)``
(``BaseOptimizer._get_current_learning_rate``). ``optax.inject_hyperparams`` also keeps a
learning rate in its state, but the one evaluated at the count BEFORE the last update: one
step behind Keras' reading, so it is not used for this.

Equality and hash are those of the optax pair plus the identity of the learning rate: flax's
TrainState keeps ``tx`` as a static field, so jit compares and hashes it; a learning rate
that is an array (unhashable) must not break that.

Translations import it from the package's generated support module.
"""

import jax
import optax


class KerasOptimizer(optax.GradientTransformationExtraArgs):
    """An optax transformation with the learning rate Keras gave the optimizer it translates."""

    def __new__(cls, tx, learning_rate):
        tx = optax.with_extra_args_support(tx)
        self = super().__new__(cls, tx.init, tx.update)
        self.learning_rate = learning_rate
        return self

    def __getnewargs__(self):
        return optax.GradientTransformationExtraArgs(self.init, self.update), self.learning_rate

    def __eq__(self, other):
        return (type(other) is type(self) and tuple.__eq__(self, other)
                and self.learning_rate is other.learning_rate)

    def __hash__(self):
        return tuple.__hash__(self)

    def learning_rate_at(self, iterations):
        """Keras' ``optimizer.learning_rate`` after ``iterations`` updates (its ``iterations``):
        the schedule at that step, or the constant rate (a float32 variable in Keras)."""
        if callable(self.learning_rate):
            return jax.numpy.asarray(self.learning_rate(iterations))
        return jax.numpy.asarray(self.learning_rate, jax.numpy.float32)
