"""Keras' ``keras.backend.get_uid(prefix)``: 1, 2, 3, ... for each prefix (keras/src/backend/common/global_state.py).

Libraries name layers with it (``f"conv_block{get_uid('conv_block')}"``). The counters live in
this module, so a translated package counts as Keras did; ``keras_clear_session`` resets them.
Translations import it from the package's generated support module.
"""

import collections

KERAS_UIDS = collections.defaultdict(int)


def keras_get_uid(prefix=""):
    """The next number for ``prefix``, starting at 1."""
    KERAS_UIDS[prefix] += 1
    return KERAS_UIDS[prefix]
