"""Keras' decoupled weight decay as the last link of an optax chain.

Every Keras 3 optimizer given ``weight_decay=wd`` runs ``variable -= variable * wd * lr``
before its update step, at that step's learning rate (``BaseOptimizer._apply_weight_decay``),
and the decay never enters the optimizer's state. Placed after the whole optimizer in an
``optax.chain`` (whose updates already carry ``-lr``), adding ``-wd * lr * param`` gives the
same new parameters: the Keras update steps never read the variable, so decaying before or
beside them is the same. ``optax.add_decayed_weights`` takes a schedule, so a learning-rate
schedule is followed step by step. Translations import it from the package's generated support module
(``{support:keras_weight_decay}`` in a template).
"""

import optax


def keras_weight_decay(weight_decay, learning_rate):
    """Adds ``-weight_decay * learning_rate * param`` to the updates (Keras' ``weight_decay=``).

    ``learning_rate`` is the optimizer's: a number or an optax schedule (called with the
    same step count as the optimizer's own).
    """
    if callable(learning_rate):
        return optax.add_decayed_weights(lambda count: -weight_decay * learning_rate(count))
    return optax.add_decayed_weights(-weight_decay * learning_rate)
