"""Keras' implicit mask propagation: Embedding(mask_zero=True) into an LSTM, and a masked mean."""

from masked_sequence.model import MaskedMean, SequenceClassifier

__all__ = ["MaskedMean", "SequenceClassifier"]
