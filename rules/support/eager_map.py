"""TF's ``tf.map_fn(fn, elems)`` outside a graph function: ``fn`` runs on each element's values.

Eager TensorFlow calls ``fn`` once per element with concrete tensors, so ``fn`` may slice by
a value (``x[0][: x[1][0]]``) or build a data-dependent shape (``tf.unique``).
``jax.lax.map`` traces ``fn`` once for all elements, so such an ``fn`` fails at trace time.
With concrete ``elems`` this calls ``fn`` per element and stacks the results (nested
structures as ``jax.lax.map`` stacks them), as TF does; with traced ones (under
``jax.jit``), or no element to call ``fn`` on, it is ``jax.lax.map``, as TF's graph mode is.
Translations import it from the package's generated support module.
"""

import jax


def eager_map(fn, elems):
    """``fn`` over the leading axis of ``elems`` (a nested structure), results stacked."""
    leaves = jax.tree_util.tree_leaves(elems)
    if not leaves or any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
        return jax.lax.map(fn, elems)
    elems = jax.tree_util.tree_map(jax.numpy.asarray, elems)
    count = jax.tree_util.tree_leaves(elems)[0].shape[0]
    if count == 0:
        return jax.lax.map(fn, elems)
    outputs = [fn(jax.tree_util.tree_map(lambda leaf, i=i: leaf[i], elems)) for i in range(count)]
    return jax.tree_util.tree_map(lambda *parts: jax.numpy.stack(parts), *outputs)
