"""``tf.train.Checkpoint(model=..., optimizer=..., **counters)`` over a translated train state.

A Keras checkpoint holds references to objects it saves and restores in place. The
translated model and optimizer live in one immutable train state (params, optax state,
step, model collections, dropout key: rules/support/KerasTrainState.py), so the state is
passed in and out: ``save`` (through KerasCheckpointManager) takes it, ``restore`` returns
the restored one. Integer counters (``step=tf.Variable(0, dtype=tf.int64)``) are mutable
KerasCounter objects, attributes of the checkpoint as in Keras, restored in place; Keras'
``save_counter`` is one too.

On disk a checkpoint is an orbax checkpoint directory (StandardSave of
``{"state": ..., "values": {counter: value}}``), not TF's ``ckpt-N.index`` files: a TF
checkpoint is not read (``tern weights`` converts one). ``restore(state, None)`` is a
no-op, as in Keras; ``assert_existing_objects_matched=True`` stands for the chained
``.assert_existing_objects_matched()``, which raises Keras' AssertionError when there is
nothing to restore. A restore always needs everything the state and counters hold (orbax
compares the whole tree): Keras without the assertion would restore what matches and
ignore the rest; here that is an error naming the checkpoint.
Translations import it from the package's generated support module.
"""

import os

import jax
import numpy
import orbax.checkpoint

from .KerasCounter import KerasCounter


class KerasCheckpoint:
    """The train state plus named integer counters, saved and restored as one orbax tree."""

    ITEM = "checkpoint"  # the orbax item (subdirectory) of a checkpoint step holding the tree

    def __init__(self, state, **counters):
        for name, counter in counters.items():
            if not isinstance(counter, KerasCounter):
                raise TypeError(f"{name}: KerasCheckpoint tracks the train state and KerasCounter values only")
        self._structure = jax.tree_util.tree_structure(self._state_tree(state))
        self._counters = {**counters, "save_counter": KerasCounter(0, numpy.int64, name="save_counter")}
        for name, counter in self._counters.items():
            setattr(self, name, counter)

    @staticmethod
    def _state_tree(state):
        return {"step": jax.numpy.asarray(state.step), "params": state.params, "opt_state": state.opt_state,
                "model_state": state.model_state, "rng": jax.random.key_data(state.rng)}

    def tree(self, state):
        """What a save writes: the train state's arrays and the counters' values."""
        tree = self._state_tree(state)
        if jax.tree_util.tree_structure(tree) != self._structure:
            raise ValueError("this train state is not shaped like the one the checkpoint was made for "
                             "(another model or optimizer)")
        return {"state": tree, "values": {name: numpy.array(c.numpy()) for name, c in self._counters.items()}}

    def restore(self, state, save_path, assert_existing_objects_matched=False):
        """``state`` with what the checkpoint at ``save_path`` holds (counters restored in place);
        ``state`` itself when ``save_path`` is None."""
        if save_path is None:
            if assert_existing_objects_matched:
                raise AssertionError("No checkpoint specified (save_path=None); nothing is being restored.")
            return state
        path = os.path.abspath(os.fspath(save_path))
        item = os.path.join(path, self.ITEM)
        if not os.path.isdir(item):
            hint = " (a TensorFlow checkpoint is not read by the translation)" if os.path.exists(path + ".index") else ""
            raise FileNotFoundError(f"no checkpoint of a KerasCheckpointManager at {path}{hint}")
        target = jax.tree_util.tree_map(orbax.checkpoint.utils.to_shape_dtype_struct, self.tree(state))
        try:
            with orbax.checkpoint.StandardCheckpointer() as checkpointer:
                tree = checkpointer.restore(item, target)
        except (ValueError, KeyError, OSError) as error:
            raise ValueError(f"cannot restore the checkpoint at {path} into this train state and counters "
                             f"({', '.join(self._counters)}): {error}") from error
        for name, counter in self._counters.items():
            counter.assign(tree["values"][name])
        restored = tree["state"]
        return state.replace(step=jax.numpy.asarray(restored["step"]), params=restored["params"],
                             opt_state=restored["opt_state"], model_state=restored["model_state"],
                             rng=jax.random.wrap_key_data(restored["rng"], impl=jax.random.key_impl(state.rng)))
