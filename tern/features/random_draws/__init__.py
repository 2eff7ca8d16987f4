"""Draws from TF's global random state in plain package functions: they take a ``key``."""

from tern.features.random_draws.feature import FEATURE, DrawFacts

__all__ = ["FEATURE", "DrawFacts"]
