"""Ragged reductions and an embedding bag over variable-length id lists."""

from ragged_features.ops import EmbeddingBag, ragged_row_means

__all__ = ["EmbeddingBag", "ragged_row_means"]
