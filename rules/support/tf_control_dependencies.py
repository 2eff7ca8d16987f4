"""``tf.control_dependencies`` in eager code: a context that does nothing.

In TF2 eager code the control inputs (``tf.debugging.assert_*`` checks, updates) have already
run when the list is built, before the body; JAX runs operations in program order too, so the
block only has to keep its body and evaluate the list first, which the call's argument does.
"""

import contextlib


def tf_control_dependencies(control_inputs):
    """A context that enters and leaves with no effect; ``control_inputs`` were evaluated by the call."""
    del control_inputs
    return contextlib.nullcontext()
