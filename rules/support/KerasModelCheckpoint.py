"""``keras.callbacks.ModelCheckpoint`` for the translated ``fit``, saving with orbax.

Keras' rules (keras/src/callbacks/model_checkpoint.py): the path is formatted with
``epoch`` (1-based), ``batch`` and the logs; ``save_best_only`` saves when the monitored
log improves on the best so far (``initial_value_threshold`` is the first reference; a
missing or non-scalar log saves anyway, with Keras' warning); ``save_freq`` is
``"epoch"`` or a number of batches. Keras checks the name it writes to, and so does this:
``.weights.h5`` with ``save_weights_only``, else ``.keras`` or ``.h5``.

What is written differs: an orbax checkpoint (a directory under that path,
``keras_checkpoint_save``) holding the model's variables in their Flax layout and, for a
whole-model save, the optimizer's state and step: not an HDF5 file or a ``.keras``
archive, and no architecture (the Flax module is code). ``model.load_weights`` of the
translation reads it back. Translations import it from the package's generated support module.
"""

import os
import warnings

import numpy

from .KerasMonitor import KerasMonitor

class KerasModelCheckpoint:
    """Saves the model (or its weights) during ``fit``, as Keras' ModelCheckpoint decides to."""

    def __init__(self, filepath, monitor="val_loss", verbose=0, save_best_only=False, save_weights_only=False,
                 mode="auto", save_freq="epoch", initial_value_threshold=None):
        self._monitor = KerasMonitor("ModelCheckpoint", monitor, mode)
        self.monitor, self.mode, self.best = monitor, self._monitor.mode, initial_value_threshold
        self.model = None
        self.params = {}
        self.verbose = verbose
        self.filepath = os.fspath(filepath)
        self.save_best_only = save_best_only
        self.save_weights_only = save_weights_only
        self.save_freq = save_freq
        self._batches_seen_since_last_saving = 0
        self._last_batch_seen = None
        self._current_epoch = 0
        if self.save_freq != "epoch" and not isinstance(self.save_freq, int):
            raise ValueError(f"Unrecognized save_freq: {self.save_freq}. Expected save_freq are 'epoch' or integer values")
        if save_weights_only and not self.filepath.endswith(".weights.h5"):
            raise ValueError("When using `save_weights_only=True` in `ModelCheckpoint`, the filepath provided must end "
                             f"in `.weights.h5` (Keras weights format). Received: filepath={self.filepath}")
        if not save_weights_only and not self.filepath.endswith((".keras", ".h5")):
            raise ValueError(f"The filepath provided must end in `.keras` (Keras model format). Received: filepath={self.filepath}")

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_batch_end(self, batch, logs=None):
        if self._should_save_on_batch(batch):
            self._save_model(epoch=self._current_epoch, batch=batch, logs=logs)

    def on_epoch_begin(self, epoch, logs=None):
        self._current_epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if self._monitor.monitor_op is None:
            self._monitor.set_monitor_op(self.model)
        if self.save_freq == "epoch":
            self._save_model(epoch=epoch, batch=None, logs=logs)

    def _should_save_on_batch(self, batch):
        if self.save_freq == "epoch":
            return False
        if self._last_batch_seen is None or batch <= self._last_batch_seen:
            add_batches = batch + 1
        else:
            add_batches = batch - self._last_batch_seen
        self._batches_seen_since_last_saving += add_batches
        self._last_batch_seen = batch
        if self._batches_seen_since_last_saving >= self.save_freq:
            self._batches_seen_since_last_saving = 0
            return True
        return False

    def _should_save_model(self, epoch, logs, filepath):
        logs = logs or {}
        if not self.save_best_only:
            if self.verbose > 0:
                print(f"\nEpoch {epoch + 1}: saving model to {filepath}")
            return True
        current = logs.get(self.monitor)
        if current is None:
            warnings.warn(f"Can save best model only with {self.monitor} available.", stacklevel=2)
            return True
        if numpy.ndim(current) > 0:
            warnings.warn(f"Can save best model only when `monitor` is a scalar value. Received: {current}. "
                          "Falling back to `save_best_only=False`.", stacklevel=2)
            return True
        best = "None" if self.best is None else f"{self.best:.5f}"
        if self._monitor.is_improvement(current, self.best):
            if self.verbose > 0:
                print(f"\nEpoch {epoch + 1}: {self.monitor} improved from {best} to {current:.5f}, saving model to {filepath}")
            self.best = current
            return True
        if self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: {self.monitor} did not improve from {best}")
        return False

    def _save_model(self, epoch, batch, logs):
        logs = logs or {}
        if batch is None or "batch" in logs:
            filepath = self.filepath.format(epoch=epoch + 1, **logs)
        else:
            filepath = self.filepath.format(epoch=epoch + 1, batch=batch + 1, **logs)
        if self._should_save_model(epoch, logs, filepath):
            if self.save_weights_only:
                self.model.save_weights(filepath, overwrite=True)
            else:
                self.model.save(filepath, overwrite=True)
            if self.verbose > 0:
                print(f"\nEpoch {epoch + 1}: finished saving model to {filepath}")
