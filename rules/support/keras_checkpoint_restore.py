"""Read back what ``keras_checkpoint_save`` wrote: the tree and its metadata.

Translations import it from the package's generated support module.
"""

import os

import orbax.checkpoint


def keras_checkpoint_restore(path):
    """``(tree, metadata)`` of the orbax checkpoint at ``path``."""
    path = os.path.abspath(os.fspath(path))
    if not os.path.isdir(path):
        raise FileNotFoundError(f"no orbax checkpoint at {path} (a Keras .h5/.keras file is not read by the translation)")
    with orbax.checkpoint.StandardCheckpointer() as checkpointer:
        tree = checkpointer.restore(path)
        metadata = checkpointer.metadata(path).custom_metadata or {}
    return tree, metadata
