"""Package functions around a translated step pass the train state along.

A *threader* (``tern/features/training/train_steps.py``) took the model and optimizer and handed them to a
step; it now takes ``state`` where the model was, rebinds it from every training call
(``state, loss = train_step(state, ...)``; a call nested in an expression is hoisted into
the statement before it) and returns ``(state, what it returned)``. A *reader* took a
model to call it for inference; it takes the state and calls ``state.predict(...)``.
``optimizer.build(model.trainable_variables)`` goes: optax state is created with the
train state; in a threader that makes its optimizer it becomes
``state = state.with_optimizer(optimizer)``, and the model before it is ``state.module``. ``optimizer.iterations`` reads ``state.step`` and ``optimizer.learning_rate``
Keras' rate for the next update, ``state.tx.learning_rate_at(state.step)``. A training call from any other package function cannot be rewritten
safely and gets a TODO saying why.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.dispatch import CachedHooks
from tern.engine.rule import Rule
from tern.engine.walk import findall
from tern.engine.transform import transform
from tern.features.training.step_syntax import UNROLLED
from tern.features.training.train_steps import OPTIMIZER_READS
from tern_rules.structure.gradient_tape_step import replace_params, state_and, static_params, step_decorator
from tern.features.training import TrainingFacts


class References(CachedHooks):
    """A transformer that tells references (``self.skip`` holds the names that are not: attribute
    names and keywords)."""

    def __init__(self):
        self.skip: set[int] = set()

    def visit_Attribute(self, node):
        self.skip.add(id(node.attr))

    def visit_Arg(self, node):
        if node.keyword is not None:
            self.skip.add(id(node.keyword))


class _Rename(References):
    """Every reference to ``old`` becomes ``state`` (or ``new``)."""

    def __init__(self, old: str, new: str = "state"):
        super().__init__()
        self.old = old
        self.new = cst.parse_expression(new)

    def visit_FunctionDef(self, node):
        # a function a rule made (an input tape's target) reads the name; one binding it is another scope
        return not any(p.name.value == self.old for p in (*node.params.params, *node.params.kwonly_params))

    def visit_Lambda(self, node):
        return False

    def leave_Name(self, original, updated):
        if original.value == self.old and id(original) not in self.skip:
            return self.new
        return updated


def _drop_arg(call: cst.Call, sig) -> cst.Call:
    """The call without its optimizer argument (positional or keyword)."""
    return _drop_args(call, sig) if sig.optimizer is not None else call


def _drop_args(call: cst.Call, sig) -> cst.Call:
    """The call without its optimizers' arguments (positional or keyword)."""
    optimizers = {o for _, _, o in sig.states if o is not None}
    indices = {sig.params.index(o) for o in optimizers}
    args, positional = [], 0
    for arg in call.args:
        if arg.keyword is None and arg.star == "":
            positional += 1
            if positional - 1 in indices:
                continue
        elif arg.keyword is not None and arg.keyword.value in optimizers:
            continue
        args.append(arg)
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=args)


def states_and(states: tuple[str, ...], value: cst.BaseExpression | None) -> cst.Tuple:
    """``state, value`` (``a_state, b_state, value`` for several states)."""
    if states == ("state",):
        return state_and(value)
    out = state_and(value)
    return out.with_changes(elements=[cst.Element(cst.Name(s)) for s in states] + [out.elements[-1]])


class _OptimizerReads(CachedHooks):
    """``optimizer.iterations`` -> ``state.step``; ``optimizer.learning_rate`` -> Keras' rate for
    the next update, ``state.tx.learning_rate_at(state.step)`` (``support/KerasOptimizer.py``)."""

    def __init__(self, optimizer: str):
        self.optimizer = optimizer

    def visit_FunctionDef(self, node):
        return False

    def visit_Lambda(self, node):
        return False

    def leave_Attribute(self, original, updated):
        if not m.matches(updated, m.Attribute(value=m.Name(self.optimizer))) or updated.attr.value not in OPTIMIZER_READS:
            return updated
        if updated.attr.value == "iterations":
            return cst.parse_expression("state.step")
        return cst.parse_expression("state.tx.learning_rate_at(state.step)")


class _Thread(CachedHooks):
    """Training calls rebind ``state``; readers' model calls become ``state.predict``."""

    def __init__(self, package, reader: bool, states: tuple[str, ...] = ("state",)):
        self.sigs = package.fact(TrainingFacts).steps
        self.reader = reader
        self.states = states  # the train states a training call rebinds, in the callee's order
        self.hoisted: list[list[cst.BaseSmallStatement]] = [[]]
        self.counts: dict[str, int] = {}

    def visit_FunctionDef(self, node):
        return self.reader  # a reader's model calls inside an input tape's target function read the state too

    def leave_Call(self, original, updated):
        if self.reader and m.matches(updated.func, m.Name("state")):
            return updated.with_changes(func=cst.parse_expression("state.predict"))
        sig = self.sigs.get(updated.func.value) if isinstance(updated.func, cst.Name) else None
        if sig is not None and sig.kind == "checkpointer":
            return _drop_arg(updated, sig)  # takes the state, returns what it returned (train_checkpoints.py)
        if sig is None or not sig.updates:
            return updated
        call = _drop_args(updated, sig)
        name = f"{updated.func.value}_result"
        self.counts[name] = self.counts.get(name, 0) + 1
        if self.counts[name] > 1:
            name += f"_{self.counts[name]}"
        self.hoisted[-1].append((name, call))
        return cst.Name(name)

    def visit_SimpleStatementLine(self, node):
        self.hoisted.append([])

    def leave_SimpleStatementLine(self, original, updated):
        hoisted = self.hoisted.pop()
        if not hoisted:
            return updated
        lines = []
        small = updated.body[0] if len(updated.body) == 1 else None
        last_name, last_call = hoisted[-1]
        direct = None
        if m.matches(small, m.Assign(targets=[m.AssignTarget(target=m.Name())], value=m.Name(last_name))):
            direct = small.targets[0].target
        elif m.matches(small, m.Expr(value=m.Name(last_name))):
            direct = cst.Name("_")
        for i, (name, call) in enumerate(hoisted):
            target = direct if (direct is not None and i == len(hoisted) - 1) else cst.Name(name)
            elements = [cst.Element(cst.Name(state)) for state in self.states] + [cst.Element(target)]
            assign = cst.Assign(targets=[cst.AssignTarget(cst.Tuple(elements, lpar=[], rpar=[]))], value=call)
            lines.append(cst.SimpleStatementLine([assign], leading_lines=updated.leading_lines if i == 0 else []))
        if direct is None:
            lines.append(updated.with_changes(leading_lines=[]))
        return cst.FlattenSentinel(lines)

    def leave_Return(self, original, updated):
        if self.reader:
            return updated
        return updated.with_changes(value=states_and(self.states, updated.value),
                                    whitespace_after_return=cst.SimpleWhitespace(" "))


class _Unroll(CachedHooks):
    """``xs = [f(x) for x in items]`` (or ``return [...]``) holding a training call becomes a loop
    appending to ``xs``, so the call can rebind the state (tern/features/training/train_steps.py ``unrollable``)."""

    def __init__(self, updating: set[str]):
        self.updating = updating

    def visit_FunctionDef(self, node):
        return False

    def leave_SimpleStatementLine(self, original, updated):
        small = updated.body[0] if len(updated.body) == 1 else None
        if m.matches(small, m.Assign(targets=[m.AssignTarget(target=m.Name())], value=m.ListComp())):
            name, comp = small.targets[0].target.value, small.value
        elif m.matches(small, m.Return(value=m.ListComp())):
            name, comp = UNROLLED, small.value
        else:
            return updated
        if not any(c.func.value in self.updating for c in findall(comp.elt, m.Call(func=m.Name()))):
            return updated
        loop = cst.For(target=comp.for_in.target, iter=comp.for_in.iter, body=cst.IndentedBlock([
            cst.SimpleStatementLine([cst.Expr(cst.Call(cst.Attribute(cst.Name(name), cst.Name("append")), [cst.Arg(comp.elt)]))])]))
        lines = [cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], cst.List([]))],
                                         leading_lines=updated.leading_lines), loop]
        if isinstance(small, cst.Return):
            lines.append(cst.SimpleStatementLine([cst.Return(cst.Name(name))]))
        return cst.FlattenSentinel(lines)


def _is_build(stmt, sig) -> bool:
    return m.matches(stmt, m.SimpleStatementLine(body=[m.Expr(value=m.Call(
        func=m.Attribute(value=m.Name(sig.optimizer), attr=m.Name("build")),
        args=[m.Arg(value=m.Attribute(value=m.Name(sig.model)))]))]))


class TrainStateCallersRule(Rule):
    id = "structure:train-state-callers"
    scope = "models"
    order = 46

    def visit_function(self, ctx, node):
        sig = ctx.package.fact(TrainingFacts).steps.get(node.name.value)
        if sig is not None and sig.kind != "step" and len(ctx.frames) == 1 and not ctx.frame.in_module_method:
            ctx.frame.tags.add("train_state")

    def leave_call(self, ctx, original, updated):
        if not isinstance(original.func, cst.Name) or original.func.value not in ctx.package.fact(TrainingFacts).steps:
            return None
        frame = ctx.frames[0] if ctx.frames else None
        if frame is not None and frame.tags & {"train_state", "train_step", "multi_step"}:
            return None
        sig = ctx.package.fact(TrainingFacts).steps[original.func.value]
        why = ctx.package.fact(TrainingFacts).refusals.get(frame.name) if frame is not None else None
        what = "takes a train state and returns (state, result)" if sig.updates else "takes a train state"
        ctx.todo(f"{original.func.value}(...)", f"translated to a pure function that {what}; this caller is not "
                 f"rewritten: {why or 'the model and optimizer are not its parameters'}")
        return None

    def leave_function(self, ctx, original, updated):
        if "train_state" not in ctx.frame.tags:
            return None
        sig = ctx.package.fact(TrainingFacts).steps[original.name.value]
        if sig.pairs:
            return self._multi(ctx, original, updated, sig)
        body = list(updated.body.body)
        if sig.builds:  # the model is the module object until the optimizer is built, then the state
            at = next(i for i, s in enumerate(body) if _is_build(s, sig))
            body = [*(transform(s, _Rename(sig.model, "state.module")) for s in body[:at]),
                    cst.parse_statement(f"state = state.with_optimizer({sig.optimizer})\n").with_changes(
                        leading_lines=body[at].leading_lines),
                    *body[at + 1:]]
        else:
            body = [s for s in body if not (sig.optimizer is not None and _is_build(s, sig))]
        block = updated.body.with_changes(body=body)
        if sig.updates:
            block = transform(block, _OptimizerReads(sig.optimizer))
        block = transform(block, _Rename(sig.model))
        if sig.updates:
            block = transform(block, _Unroll({n for n, s in ctx.package.fact(TrainingFacts).steps.items() if s.updates}))
        block = transform(block, _Thread(ctx.package, reader=not sig.updates))
        if sig.updates and not m.matches(block.body[-1], m.SimpleStatementLine(body=[m.Return()])):
            block = block.with_changes(body=[*block.body, cst.parse_statement("return state, None\n")])
        params = replace_params(updated.params, sig.model, sig.optimizer)
        out = updated.with_changes(params=params, body=block)
        return out.with_changes(decorators=step_decorator(ctx, original, out, static_params(params, out.body)))

    @staticmethod
    def _multi(ctx, original, updated, sig):
        """A threader of several train states (tern/features/training/multi_state_steps.py): each model becomes its
        state, the optimizers and their ``build`` go, training calls rebind every state."""
        states = sig.states
        body = [s for s in updated.body.body if not any(_is_build(s, _Pair(m, o)) for _, m, o in states)]
        block = updated.body.with_changes(body=body)
        for state, model, _ in states:
            block = transform(block, _Rename(model, state))
        block = transform(block, _Unroll({n for n, s in ctx.package.fact(TrainingFacts).steps.items() if s.updates}))
        block = transform(block, _Thread(ctx.package, reader=False, states=tuple(s for s, _, _ in states)))
        if not m.matches(block.body[-1], m.SimpleStatementLine(body=[m.Return()])):
            block = block.with_changes(body=[*block.body, cst.parse_statement(
                f"return {', '.join(s for s, _, _ in states)}, None\n")])
        optimizers = {o for _, _, o in states}
        renamed = {m: s for s, m, _ in states}
        kept = [p.with_changes(name=cst.Name(renamed[p.name.value])) if p.name.value in renamed else p
                for p in updated.params.params if p.name.value not in optimizers]
        if kept:
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        params = updated.params.with_changes(params=kept)
        out = updated.with_changes(params=params, body=block)
        return out.with_changes(decorators=step_decorator(ctx, original, out, static_params(params, out.body)))


class _Pair:
    """The two names ``_is_build`` reads from a signature."""

    def __init__(self, model: str, optimizer: str):
        self.model, self.optimizer = model, optimizer


RULE = TrainStateCallersRule()
