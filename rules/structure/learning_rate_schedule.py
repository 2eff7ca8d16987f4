"""A custom ``LearningRateSchedule`` subclass derives from tern's schedule base instead.

``class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule)`` becomes
``class WarmupCosine(KerasLearningRateSchedule)`` (``rules/support/KerasLearningRateSchedule.py``):
an instance is a callable of the step count, an optax schedule as it is, with Keras'
``from_config`` / ``get_config`` contract. The class body is the user's: ``__call__`` is
translated by the API tables like any function (``tf.cast`` -> ``jnp.asarray``, ...), and
whatever they cannot translate keeps its TODO, so the class is never silently half-done.
Only the base is rewritten; any other use of the Keras symbol (``isinstance(lr,
LearningRateSchedule)``) keeps the table's "no rule" TODO: each translated file has its
own copy of the base, so an isinstance test across files would not mean the same.
"""

from __future__ import annotations

import libcst as cst

from tern.engine.rule import Rule

BASES = frozenset({"keras.optimizers.schedules.LearningRateSchedule", "tensorflow.optimizers.schedules.LearningRateSchedule"})
SUPPORT = "KerasLearningRateSchedule"


class LearningRateScheduleRule(Rule):
    id = "structure:learning-rate-schedule"
    order = 40

    def leave_class(self, ctx, original, updated):
        if ctx.keras_class is not None:
            return None  # a Keras layer or model: keras_class.py
        bases = list(updated.bases)
        hits = [i for i, base in enumerate(original.bases) if base.keyword is None and ctx.resolve(base.value) in BASES]
        if not hits:
            return None
        for i in hits:
            bases[i] = bases[i].with_changes(value=cst.Name(SUPPORT))
        return updated.with_changes(bases=bases)


RULE = LearningRateScheduleRule()
