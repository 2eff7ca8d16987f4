"""Keras' threshold arguments of ``Precision`` and ``Recall`` (keras/src/metrics/metrics_utils.py).

``thresholds=None`` means 0.5, or, with ``top_k``, -1e10 (every top-k prediction counts as
positive); a number is a one-element list; every threshold must lie in [0, 1]. Whether the
list is evenly spaced over [0, 1] decides which of Keras' counting paths is taken
(``keras_thresholds_evenly_distributed``). Translations import it from the package's generated support module.
"""

from .keras_thresholds_evenly_distributed import keras_thresholds_evenly_distributed

def keras_metric_thresholds(thresholds, top_k=None):
    """``(thresholds as a list, whether Keras treats them as evenly distributed)``."""
    if thresholds is None:
        thresholds = [0.5 if top_k is None else -1e10]
    else:
        thresholds = thresholds if isinstance(thresholds, list) else [thresholds]
        invalid = [t for t in thresholds if t is None or t < 0 or t > 1]
        if invalid:
            raise ValueError(f"Threshold values must be in [0, 1]. Received: {invalid}")
    return thresholds, keras_thresholds_evenly_distributed(thresholds)
