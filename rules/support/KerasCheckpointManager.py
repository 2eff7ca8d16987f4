"""``tf.train.CheckpointManager`` over a KerasCheckpoint, with orbax's CheckpointManager.

Keras' manager numbers checkpoints (``checkpoint_number``, else the checkpoint's
``save_counter``, which every save increments), keeps the newest ``max_to_keep`` (None:
all) and names the latest. Orbax's CheckpointManager does the same over step directories
``<directory>/<checkpoint_name>_<number>`` (Keras: ``<checkpoint_name>-<number>`` prefixes);
each save is written to a temporary directory and renamed into place when complete, so a
save killed halfway leaves the previous checkpoints as they were and is never listed.
Saves are synchronous, as Keras' are. ``save`` takes the train state to write
(KerasCheckpoint).

Differences, by design: orbax orders checkpoints by number, Keras by save time, so a
number not above the latest one (Keras would overwrite or reorder) is an error here;
``keep_checkpoint_every_n_hours``, ``step_counter``/``checkpoint_interval`` and ``init_fn``
are not translated (the rule leaves them with a TODO).
Translations import it from the package's generated support module.
"""

import os

import orbax.checkpoint


class KerasCheckpointManager:
    """Numbered orbax checkpoints of a KerasCheckpoint in ``directory``, the newest ``max_to_keep`` kept."""

    def __init__(self, checkpoint, directory, max_to_keep, checkpoint_name="ckpt"):
        if max_to_keep is not None and max_to_keep <= 0:
            raise ValueError(f"Expected a positive integer or `None` for `max_to_keep`, got {max_to_keep}.")
        self._checkpoint = checkpoint
        self._directory = os.fspath(directory)
        self._name = checkpoint_name
        options = orbax.checkpoint.CheckpointManagerOptions(
            max_to_keep=max_to_keep, step_prefix=checkpoint_name, create=False, enable_async_checkpointing=False)
        self._manager = orbax.checkpoint.CheckpointManager(os.path.abspath(self._directory), options=options)

    @property
    def directory(self):
        return self._directory

    @property
    def checkpoint(self):
        return self._checkpoint

    def _path(self, number):
        return os.path.join(self._directory, f"{self._name}_{number}")

    @property
    def latest_checkpoint(self):
        """The path of the newest checkpoint (for ``checkpoint.restore``), or None if there is none."""
        latest = self._manager.latest_step()
        return None if latest is None else self._path(latest)

    @property
    def checkpoints(self):
        """The paths of the kept checkpoints, oldest first."""
        return [self._path(number) for number in sorted(self._manager.all_steps())]

    def save(self, state, checkpoint_number=None):
        """Write ``state`` and the checkpoint's counters as checkpoint ``checkpoint_number``
        (default: the incremented save counter); returns its path."""
        self._checkpoint.save_counter.assign_add(1)
        number = int(self._checkpoint.save_counter if checkpoint_number is None else checkpoint_number)
        latest = self._manager.latest_step()
        if latest is not None and number <= latest:
            raise ValueError(f"checkpoint {number} is not after the latest one in {self._directory} ({latest}): "
                             "orbax orders checkpoints by number and does not overwrite them")
        tree = self._checkpoint.tree(state)
        item = orbax.checkpoint.args.StandardSave(tree)
        self._manager.save(number, args=orbax.checkpoint.args.Composite(**{self._checkpoint.ITEM: item}), force=True)
        self._manager.wait_until_finished()
        return self._path(number)

    def sync(self):
        self._manager.wait_until_finished()
