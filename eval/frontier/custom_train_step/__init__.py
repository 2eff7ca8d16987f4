"""A model that owns its training step (Keras' "customizing fit" guide)."""

from custom_train_step.model import RegressionModel, make_model

__all__ = ["RegressionModel", "make_model"]
