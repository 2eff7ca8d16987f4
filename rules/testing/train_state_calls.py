"""Tests call translated training functions the way the Keras code did.

A Keras test steps a model and an optimizer in place and then looks at them
(``model.get_weights()``, ``optimizer.iterations``). The translated step is pure
(``train_step(state, ...) -> (state, loss)``, see ``structure/gradient_tape_step.py``), so
the test keeps its objects and a small helper written into the test file does the
bookkeeping: ``train_step(model, optimizer, loss_fn, x, y)`` becomes
``_tern_train(model, optimizer, lambda state: train_step(state, loss_fn, x, y))``, which
builds the state from the model's variables (the ``_tern_apply`` registry of
``module_calls.py``) and the optimizer's saved state, runs the call and writes the new
variables and optimizer state back. A reader (``eval_step(model, ...)``) gets
``_tern_train_state(model)``. ``optimizer.build(...)`` goes (the optax state is made on
first use); ``optimizer.iterations`` reads the saved step count.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.rule import Rule
from tern.translate import insert_after_imports
from tern_rules.testing.module_calls import assigned_pairs, runtime_statements

RUNTIME = '''

_TERN_TRAINING = {}


def _tern_train_state(module, optimizer=None):
    """The module's variables (and the optimizer's state for them) as one KerasTrainState."""
    if id(module) not in _TERN_VARIABLES and getattr(module, "tern_input_specs", None) is None:
        raise ValueError("the model has no variables yet (Keras built it from its Input): call it once before training")
    tx = optax.identity() if optimizer is None else optimizer
    state = KerasTrainState.from_variables(module.apply, _tern_variables(module), tx)
    saved = _TERN_TRAINING.get(id(optimizer))
    if optimizer is not None and saved is not None:
        state = state.replace(step=saved[1], opt_state=saved[2], rng=saved[3])
    return state


def _tern_train(module, optimizer, run):
    """``run(state)`` returns the next state and a result; keep the state in place, as Keras does."""
    state, out = run(_tern_train_state(module, optimizer))
    _TERN_VARIABLES[id(module)] = (module, state.variables())
    _TERN_TRAINING[id(optimizer)] = (optimizer, state.step, state.opt_state, state.rng)
    return out


def _tern_iterations(optimizer):
    """Keras' ``optimizer.iterations``: the updates applied so far."""
    saved = _TERN_TRAINING.get(id(optimizer))
    return 0 if saved is None else saved[1]
'''


OPTIMIZER_API = ("the Keras optimizer is an optax transformation here; its state lives in the train state of a "
                 "translated step (read with _tern_iterations), and other optimizer API has no counterpart yet")


def _optimizers(ctx) -> set[str]:
    return ctx.rule_state.setdefault("optimizer_names", set())


def _arg(call: cst.Call, sig, param: str) -> tuple[int, cst.Arg] | None:
    index = sig.params.index(param)
    positional = [i for i, a in enumerate(call.args) if a.keyword is None and a.star == ""]
    for i, a in enumerate(call.args):
        if a.keyword is not None and a.keyword.value == param:
            return i, a
    if index < len(positional):
        return positional[index], call.args[positional[index]]
    return None


def _comma():
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


class TrainStateCallsRule(Rule):
    id = "testing:train-state-calls"
    scope = "tests"
    order = 79  # before module_calls.py, whose runtime this one extends

    def leave_statement(self, ctx, original, updated):
        for small in original.body:
            if not isinstance(small, cst.Assign):
                continue
            for target, value in assigned_pairs(small):
                name = (ctx.resolve(value.func) or "") if isinstance(value, cst.Call) else ""
                if isinstance(target, cst.Name) and name.startswith("keras.optimizers."):
                    _optimizers(ctx).add(target.value)
        if len(original.body) == 1 and m.matches(original.body[0], m.Expr(value=m.Call(
                func=m.Attribute(attr=m.Name("build")),
                args=[m.Arg(value=m.Attribute(attr=m.Name("trainable_variables") | m.Name("trainable_weights")))]))):
            return cst.RemovalSentinel.REMOVE  # optax state is created with the train state
        return None

    def leave_call(self, ctx, original, updated):
        func = original.func
        if m.matches(func, m.Attribute(value=m.Name())) and func.value.value in _optimizers(ctx) and func.attr.value != "build":
            ctx.todo(f"keras.optimizers.Optimizer.{func.attr.value}", OPTIMIZER_API)
            return None
        if not isinstance(original.func, cst.Name):
            return None
        sig = ctx.package.train.get(original.func.value)
        if sig is None:
            return None
        model = _arg(updated, sig, sig.model)
        if model is None:
            return None
        self._need_runtime(ctx)
        args = list(updated.args)
        state_arg = model[1].with_changes(value=cst.Name("state"))
        if not sig.updates:
            call = cst.Call(cst.Name("_tern_train_state"), [cst.Arg(model[1].value)])
            args[model[0]] = model[1].with_changes(value=call)
            return updated.with_changes(args=args)
        optimizer = _arg(updated, sig, sig.optimizer)
        if optimizer is None:
            return None
        args[model[0]] = state_arg
        args = [a for i, a in enumerate(args) if i != optimizer[0]]
        if args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        run = cst.Lambda(cst.Parameters([cst.Param(cst.Name("state"))]), updated.with_changes(args=args))
        return cst.Call(cst.Name("_tern_train"), [
            cst.Arg(model[1].value, comma=_comma()), cst.Arg(optimizer[1].value, comma=_comma()), cst.Arg(run)])

    def leave_attribute(self, ctx, original, updated):
        if not (isinstance(original.value, cst.Name) and original.value.value in _optimizers(ctx)):
            return None
        if original.attr.value == "iterations":
            self._need_runtime(ctx)
            return cst.Call(cst.Name("_tern_iterations"), [cst.Arg(updated.value)])
        if original.attr.value != "build":
            ctx.todo(f"keras.optimizers.Optimizer.{original.attr.value}", OPTIMIZER_API)
        return None

    @staticmethod
    def _need_runtime(ctx):
        ctx.rule_state["runtime"] = True  # module_calls.py's registry
        ctx.rule_state["train_runtime"] = True
        ctx.support.add("KerasTrainState")

    def leave_module(self, ctx, updated):
        if not ctx.rule_state.get("train_runtime"):
            return None
        ctx.plan.spell("optax")
        return insert_after_imports(updated, runtime_statements(RUNTIME))


RULE = TrainStateCallsRule()
