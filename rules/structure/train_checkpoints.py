"""``tf.train.Checkpoint`` / ``CheckpointManager`` of a model and its optimizer become orbax
checkpoints of the train state.

::

    def make_checkpoint_manager(model, optimizer, directory):      def make_checkpoint_manager(state, directory):
        checkpoint = tf.train.Checkpoint(                              checkpoint = KerasCheckpoint(
            step=tf.Variable(0, dtype=tf.int64),                           state, step=KerasCounter(0, dtype=np.int64))
            model=model, optimizer=optimizer)                          manager = KerasCheckpointManager(
        manager = tf.train.CheckpointManager(                              checkpoint, directory, max_to_keep=3)
            checkpoint, directory, max_to_keep=3)                      return checkpoint, manager
        return checkpoint, manager

    checkpoint.restore(manager.latest_checkpoint)                   state = checkpoint.restore(state, manager.latest_checkpoint)
    manager.save(checkpoint_number=checkpoint.step)                 manager.save(state, checkpoint_number=checkpoint.step)

The checkpoint holds the whole train state (params, optax state, step, model collections,
dropout key) and integer ``tf.Variable`` counters, as mutable KerasCounter attributes
(rules/support/KerasCheckpoint.py, KerasCheckpointManager.py, KerasCounter.py). Which
functions qualify, and why others do not, is decided in ``tern/features/training/train_checkpoints.py``;
``train_state_callers.py`` threads the state through them. Anything else is left with a
TODO and its reason.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.rule import Rule
from tern.features.training.train_checkpoints import INT_DTYPES, RESTORE_CHAINS
from tern.features.training import TrainingFacts

CHECKPOINT = "tensorflow.train.Checkpoint"
MANAGER = "tensorflow.train.CheckpointManager"
GENERIC = ("translated only in a package function that checkpoints the model and optimizer it is passed, "
           "with integer tf.Variable counters (tern/features/training/train_checkpoints.py)")


def _sig(ctx):
    frame = ctx.frames[0] if ctx.frames else None
    if frame is None or len(ctx.frames) != 1 or frame.in_module_method:
        return None, None
    sig = ctx.package.fact(TrainingFacts).steps.get(frame.name)
    if sig is not None and sig.kind in ("threader", "checkpointer"):
        return sig, frame
    return None, frame


def _comma():
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


class TrainCheckpointsRule(Rule):
    id = "structure:train-checkpoints"
    consumes = frozenset({CHECKPOINT, MANAGER})
    scope = "models"
    order = 44

    def leave_call(self, ctx, original, updated):
        name = ctx.resolve(original.func)
        if name in (CHECKPOINT, MANAGER):
            sig, frame = _sig(ctx)
            if sig is None:
                why = ctx.package.fact(TrainingFacts).refusals.get(frame.name) if frame is not None else None
                ctx.todo(name.replace("tensorflow.", "tf."), why or GENERIC)
                return None
            return self._checkpoint(ctx, sig, original) if name == CHECKPOINT else self._manager(ctx, updated)
        if m.matches(original.func, m.Attribute(value=m.Name(), attr=m.Name("save"))):
            sig, _ = _sig(ctx)
            if sig is not None and dict(sig.checkpoints).get(original.func.value.value) == "manager":
                args = [cst.Arg(cst.Name("state"), comma=_comma() if updated.args else cst.MaybeSentinel.DEFAULT),
                        *updated.args]
                return updated.with_changes(args=args)
        return None

    def _checkpoint(self, ctx, sig, original):
        args = [cst.Arg(cst.Name(sig.model))]
        dropped = set()
        for kw in original.args:
            if m.matches(kw.value, m.Name(sig.model) | m.Name(sig.optimizer)):
                continue
            call = kw.value
            dtype = "int32"
            for arg in call.args[1:]:
                if arg.keyword is not None and arg.keyword.value == "dtype":
                    resolved = ctx.resolve(arg.value) or ""
                    dtype = resolved.rsplit(".", 1)[-1] if resolved else arg.value.evaluated_value
                    dropped.add(resolved)
            counter = [cst.Arg(call.args[0].value, comma=_comma()),
                       cst.Arg(ctx.target_expr(INT_DTYPES[dtype]), keyword=cst.Name("dtype"),
                               equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))]
            value = cst.Call(cst.Name("KerasCounter"), counter)
            args.append(cst.Arg(value, keyword=kw.keyword, equal=kw.equal))
        # the counters' dtypes are NumPy's now: what the dtype table said about tf.int64 no longer applies
        shorts = {d.replace("tensorflow.", "tf.") for d in dropped}
        ctx.pending[:] = [t for t in ctx.pending if t.construct not in shorts]
        return cst.Call(cst.Name("KerasCheckpoint"), [a.with_changes(comma=_comma()) for a in args[:-1]] + args[-1:])

    def _manager(self, ctx, updated):
        return updated.with_changes(func=cst.Name("KerasCheckpointManager"))

    def leave_statement(self, ctx, original, updated):
        """``c.restore(path)[.assert_existing_objects_matched()]`` -> ``state = c.restore(state, path[, ...=True])``."""
        if len(updated.body) != 1 or not isinstance(updated.body[0], cst.Expr):
            return None
        sig, _ = _sig(ctx)
        if sig is None:
            return None
        call, flags = updated.body[0].value, []
        if m.matches(call, m.Call(func=m.Attribute(value=m.Call(), attr=m.Name()), args=[])) \
                and call.func.attr.value in RESTORE_CHAINS:
            flags.append(call.func.attr.value)
            call = call.func.value
        if not m.matches(call, m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("restore")))) \
                or dict(sig.checkpoints).get(call.func.value.value) != "checkpoint":
            return None
        eq = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
        args = [cst.Arg(cst.Name("state"), comma=_comma()), *call.args]
        for flag in flags:
            args[-1] = args[-1].with_changes(comma=_comma())
            args.append(cst.Arg(cst.Name("True"), keyword=cst.Name(flag), equal=eq))
        assign = cst.Assign([cst.AssignTarget(cst.Name("state"))], call.with_changes(args=args))
        return updated.with_changes(body=[assign])


RULE = TrainCheckpointsRule()
