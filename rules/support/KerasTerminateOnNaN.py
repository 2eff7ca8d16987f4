"""``keras.callbacks.TerminateOnNaN`` for the translated ``fit``: stop (or raise) when the
running loss of a training batch is NaN or infinite (keras/src/callbacks/terminate_on_nan.py).
Translations import it from the package's generated support module.
"""

import numpy


class KerasTerminateOnNaN:
    """Stops ``fit`` at the first training batch whose logged loss is NaN or infinite."""

    def __init__(self, raise_error=False):
        self.raise_error = raise_error
        self.model = None
        self.params = {}

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and (numpy.isnan(loss) or numpy.isinf(loss)):
            if self.raise_error:
                raise RuntimeError(f"NaN or Inf loss encountered at batch {batch}. Loss value: {loss}. "
                                   "Terminating training immediately.")
            print(f"Batch {batch}: Invalid loss, terminating training")
            self.model.stop_training = True
