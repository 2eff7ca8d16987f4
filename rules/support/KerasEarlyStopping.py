"""``keras.callbacks.EarlyStopping`` for the translated ``fit`` (rules/support/KerasTrainer.py).

Keras' exact rules (keras/src/callbacks/early_stopping.py): nothing is watched before
``start_from_epoch``; each watched epoch adds one to ``wait``, an improvement on the best
value so far (``min_delta`` and the mode as in ``KerasMonitor``) makes it the best
and resets ``wait`` to 0 only if it also improves on ``baseline`` (when given); training
stops when ``wait >= patience`` after the first epoch. With ``restore_best_weights`` the
weights of the best epoch (or of the first watched epoch if none improved) are put back
when training ends, whether it stopped early or ran every epoch. Translations import it from the package's generated support module.
"""

import warnings

from .KerasMonitor import KerasMonitor

class KerasEarlyStopping:
    """Stops ``fit`` when the monitored log has stopped improving, as Keras' EarlyStopping does."""

    def __init__(self, monitor="val_loss", min_delta=0, patience=0, verbose=0, mode="auto", baseline=None,
                 restore_best_weights=False, start_from_epoch=0):
        self._monitor = KerasMonitor("EarlyStopping", monitor, mode, min_delta=min_delta)
        self.monitor, self.mode, self.best = monitor, self._monitor.mode, None
        self.model = None
        self.params = {}
        self.patience = patience
        self.verbose = verbose
        self.baseline = baseline
        self.wait = 0
        self.stopped_epoch = 0
        self.restore_best_weights = restore_best_weights
        self.best_weights = None
        self.best_epoch = 0
        self.start_from_epoch = start_from_epoch

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.stopped_epoch = 0
        self.best = None
        self.best_weights = None
        self.best_epoch = 0

    def on_epoch_end(self, epoch, logs=None):
        if self._monitor.monitor_op is None:
            self._monitor.set_monitor_op(self.model)
        current = self.get_monitor_value(logs)
        if current is None or epoch < self.start_from_epoch:
            return
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights = self.model.get_weights()
            self.best_epoch = epoch
        self.wait += 1
        if self._monitor.is_improvement(current, self.best):
            self.best = current
            self.best_epoch = epoch
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            if self.baseline is None or self._monitor.is_improvement(current, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self.stopped_epoch > 0 and self.verbose > 0:
            print(f"Epoch {self.stopped_epoch + 1}: early stopping")
        if self.restore_best_weights and self.best_weights is not None:
            if self.verbose > 0:
                print(f"Restoring model weights from the end of the best epoch: {self.best_epoch + 1}.")
            self.model.set_weights(self.best_weights)

    def get_monitor_value(self, logs):
        value = (logs or {}).get(self.monitor)
        if value is None:
            warnings.warn(f"Early stopping conditioned on metric `{self.monitor}` which is not available. "
                          f"Available metrics are: {','.join(list((logs or {}).keys()))}", stacklevel=2)
        return value
