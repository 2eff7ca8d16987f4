"""``tf.GradientTape`` over a model's weights in translated tests: gradients of the registry's params."""

import jax

from .registry import _TERN_VARIABLES


def _tern_tape_params():
    """The params of every model in the registry: what a Keras tape in a test watches."""
    return {key: entry[1]["params"] for key, entry in _TERN_VARIABLES.items() if "params" in entry[1]}


class _TernTapeParams:
    """The registry with ``params`` (model key -> params) in place of the models' own, restored on exit."""

    def __init__(self, params, only=False):
        self.params, self.only = params, only

    def __enter__(self):
        self.saved = dict(_TERN_VARIABLES)
        for key, value in self.params.items():
            module, variables = _TERN_VARIABLES[key]
            _TERN_VARIABLES[key] = (module, {"params": value} if self.only else {**variables, "params": value})

    def __exit__(self, kind, *exc):
        built = set(_TERN_VARIABLES) - set(self.saved)
        _TERN_VARIABLES.clear()
        _TERN_VARIABLES.update(self.saved)
        if built and kind is None:
            raise ValueError("a model was built inside the tape (Keras builds a layer on its first call): call it "
                             "once before the `with` block, so its variables exist to be differentiated")


def _tern_tape_gradient(grads, sources):
    """Keras' ``tape.gradient(target, sources)``: ``sources()`` read with the gradients in place of the params."""
    with _TernTapeParams(grads, only=True):
        found = sources()
        if isinstance(found, (list, tuple)):
            return [jax.numpy.asarray(v) for v in found]
        return jax.numpy.asarray(found)
