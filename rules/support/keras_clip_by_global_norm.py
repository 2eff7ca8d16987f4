"""``tf.clip_by_global_norm`` on any pytree of arrays (TF's list, or a step's gradient tree).

TF scales every tensor by ``clip_norm * min(1 / global_norm, 1 / clip_norm)``, where the
global norm is the L2 norm of all entries together (``None`` entries skipped), and
returns the norm before clipping. A non-finite norm makes every entry NaN, as in TF
(``scale + (norm - norm)``). Translations import it from the package's generated support module.
"""

import jax


def keras_clip_by_global_norm(t_list, clip_norm):
    """``(t_list scaled to a global norm of at most clip_norm, the global norm before)``."""
    leaves = jax.tree_util.tree_leaves(t_list)
    norm = jax.numpy.sqrt(sum(jax.numpy.sum(jax.numpy.square(jax.numpy.asarray(x, jax.numpy.float32))) for x in leaves))
    scale = clip_norm * jax.numpy.minimum(1.0 / norm, 1.0 / jax.numpy.asarray(clip_norm, norm.dtype))
    scale = scale + (norm - norm)
    return jax.tree_util.tree_map(lambda x: (x * scale).astype(jax.numpy.asarray(x).dtype), t_list), norm
