"""``self.blocks[i](x)`` inside a layer's ``call``, with the flag Keras passes implicitly.

Keras gives a sublayer the ``training`` flag of the call it runs in whenever the sublayer's
``call`` takes one; Flax passes nothing implicitly. Where the translation cannot tell what a
held sublayer is (an element of a list filled by a package factory: keras-cv's YOLOX heads
keep ``stems``, ``classification_convs``), the call asks the callee, as Keras does.
"""

import inspect


def keras_call(layer, *args, training, **kwargs):
    """``layer(*args, **kwargs)``, with ``training`` when the layer's call takes it."""
    try:
        takes = "training" in inspect.signature(layer).parameters
    except (TypeError, ValueError):  # a builtin or compiled callable: no training flag
        takes = False
    return layer(*args, training=training, **kwargs) if takes else layer(*args, **kwargs)
