"""Keras' ``keras.backend.clear_session()``, for what a translation still keeps: the ``get_uid`` counters.

Translations import it from the package's generated support module.
"""

from .keras_get_uid import KERAS_UIDS


def keras_clear_session():
    """Start every ``keras_get_uid`` prefix at 1 again."""
    KERAS_UIDS.clear()
