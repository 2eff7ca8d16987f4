"""A small Keras package with a GradientTape training step, for the training-step verification tests."""
