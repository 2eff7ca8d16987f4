"""TF's ``tf.cond(pred, true_fn, false_fn)`` outside a graph function: only one branch runs.

Eager TensorFlow evaluates the predicate and calls the chosen branch alone, so code guards
an empty tensor with it (``tf.cond(tf.shape(x)[0] > 0, gather, empty)``): the other branch
would fail on that input. ``jax.lax.cond`` traces both branches, so the guarded one fails at
trace time. With a known (concrete) predicate this calls the chosen branch, as TF does; with
a traced one (under ``jax.jit``) it is ``jax.lax.cond``, as TF's graph mode is.
Translations import it from the package's generated support module.
"""

import jax


def eager_cond(pred, true_fn, false_fn):
    """``true_fn()`` or ``false_fn()``: one branch for a known predicate, ``jax.lax.cond`` when traced."""
    if isinstance(pred, jax.core.Tracer):
        return jax.lax.cond(pred, true_fn, false_fn)
    return true_fn() if pred else false_fn()
