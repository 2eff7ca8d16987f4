"""Keras training: steps on a GradientTape, compiled models, step overrides, checkpoints.

The pre-pass facts are ``TrainingFacts`` (``feature.py``); the rules that use them are
under ``rules/structure`` and ``rules/testing`` (docs/architecture.md lists them).
"""

from tern.features.training.feature import FEATURE, TrainingFacts

__all__ = ["FEATURE", "TrainingFacts"]
