"""``keras.callbacks.History``: what ``fit`` returns, the logs of every epoch.

``history`` maps each log name (``"loss"``, the metric names, their ``"val_"`` versions) to
its Python float per epoch, ``epoch`` lists the epochs run; as in Keras the model's
``history`` attribute is set to it after every epoch. The trainer
(rules/support/KerasTrainer.py) adds one to every ``fit`` unless one is passed in.
Translations import it from the package's generated support module.
"""


class KerasHistory:
    """The per-epoch logs of a ``fit``, as Keras' History callback keeps them."""

    def __init__(self):
        self.history = {}
        self.epoch = []
        self.params = {}
        self.model = None

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_begin(self, logs=None):
        self.epoch = []

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(value)
        self.model.history = self
