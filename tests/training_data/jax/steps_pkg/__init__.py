"""The translation of ``tests/training_data/tf/steps_pkg``: tern migrate's output when it was
written, kept fixed here so the training-verification harness tests do not move with the rules
(``test_training_verify.py`` checks the live ``tern migrate`` output separately)."""
