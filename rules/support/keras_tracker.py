"""A Keras model's metric tracker (``self.loss_tracker = keras.metrics.Mean(name="loss")``) on a Flax module.

Keras builds the tracker in the model's constructor and keeps it on the model object:
``fit`` resets and updates it, tests read ``model.loss_tracker.result()`` and
``model.metrics``. A Flax module's ``setup`` runs only on the bound clones ``apply``
makes, so the translation keeps each tracker in the module object's ``__dict__``
instead, built on first use by ``make``: one object per module object, shared by every
caller that holds it (the trainer updates it outside jit, after each step). A clone
(``module.clone()``, the clones inside ``apply``) gets its own, unused, tracker.
Translations import it from the package's generated support module.
"""


def keras_tracker(module, attr, make):
    """The tracker ``module`` keeps as ``attr``, built by ``make()`` the first time it is asked for."""
    trackers = module.__dict__.get("_keras_trackers")
    if trackers is None:
        trackers = {}
        object.__setattr__(module, "_keras_trackers", trackers)
    if attr not in trackers:
        trackers[attr] = make()
    return trackers[attr]
