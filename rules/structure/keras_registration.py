"""Keras' serialization registry decorators go: ``@keras.utils.register_keras_serializable(...)``.

The decorator records a class or function under ``package>name`` so that
``keras.models.load_model`` and ``keras.layers.deserialize`` can find it by name in a saved
config. A translation has no Keras registry and no Keras configs to read: a Flax module is a
dataclass, its fields are its config, and a function is found by import. So the decorator
has nothing left to do and is removed; a call that reads the registry (``deserialize``,
``get_registered_object``, ``load_model``) keeps its own TODO. Other decorators (``gin.configurable``,
``tf.function``...) are left to their own rules.
"""

from __future__ import annotations

import libcst as cst

from tern.engine.rule import Rule

REGISTERS = frozenset({
    "keras.utils.register_keras_serializable",
    "keras.saving.register_keras_serializable",
    "keras.saving.register_serializable",
})


def _registers(ctx, decorator: cst.Decorator) -> bool:
    target = decorator.decorator
    func = target.func if isinstance(target, cst.Call) else target
    return ctx.resolve(func) in REGISTERS


class KerasRegistrationRule(Rule):
    id = "structure:keras-registration"
    consumes = REGISTERS
    scope = "all"
    order = 5

    def _drop(self, ctx, original, updated):
        keep = [d for d, o in zip(updated.decorators, original.decorators) if not _registers(ctx, o)]
        if len(keep) == len(updated.decorators):
            return None
        return updated.with_changes(decorators=keep)

    def leave_class(self, ctx, original, updated):
        return self._drop(ctx, original, updated)

    def leave_function(self, ctx, original, updated):
        return self._drop(ctx, original, updated)


RULE = KerasRegistrationRule()
