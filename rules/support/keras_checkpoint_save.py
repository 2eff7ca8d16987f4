"""Save a pytree with orbax where Keras saves a weights file, replacing it atomically.

``model.save_weights("best.weights.h5")`` and ``ModelCheckpoint`` write one HDF5 file;
the translation writes an orbax checkpoint (``StandardCheckpointer``) under the same path,
which is then a directory. It is staged beside the target and renamed into place, the old
one moved aside first, so a reader finds the old checkpoint or the new one, never half of
one (orbax itself commits a save by renaming its temporary directory). ``metadata`` (JSON)
is stored with it. Translations import it from the package's generated support module.
"""

import os
import shutil
import uuid

import orbax.checkpoint


def keras_checkpoint_save(path, tree, metadata=None, overwrite=True):
    """Write ``tree`` (nested dicts of arrays) at ``path`` with orbax, replacing what is there if ``overwrite``."""
    path = os.path.abspath(os.fspath(path))
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path} exists and overwrite=False")
    parent, name = os.path.split(path)
    os.makedirs(parent, exist_ok=True)
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staged, old = os.path.join(parent, f".{name}.tern-new-{tag}"), os.path.join(parent, f".{name}.tern-old-{tag}")
    try:
        with orbax.checkpoint.StandardCheckpointer() as checkpointer:
            checkpointer.save(staged, tree, custom_metadata=metadata or {})
            checkpointer.wait_until_finished()
        moved = os.path.lexists(path)
        if moved:
            os.replace(path, old)
        try:
            os.replace(staged, path)
        except OSError:
            if moved:
                os.replace(old, path)
            raise
    finally:
        shutil.rmtree(staged, ignore_errors=True)
        if os.path.isdir(old):
            shutil.rmtree(old, ignore_errors=True)
        elif os.path.lexists(old):
            os.remove(old)
