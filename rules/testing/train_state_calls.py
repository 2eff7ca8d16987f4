"""Tests call translated training functions the way the Keras code did.

A Keras test steps a model and an optimizer in place and then looks at them
(``model.get_weights()``, ``optimizer.iterations``). The translated step is pure
(``train_step(state, ...) -> (state, loss)``, see ``structure/gradient_tape_step.py``), so
the test keeps its objects and a small support helper (``support/registry_training.py``) does the
bookkeeping: ``train_step(model, optimizer, loss_fn, x, y)`` becomes
``_tern_train(model, optimizer, lambda state: train_step(state, loss_fn, x, y))``, which
builds the state from the model's variables (the ``_tern_apply`` registry of
``module_calls.py``) and the optimizer's saved state, runs the call and writes the new
variables and optimizer state back. A reader (``eval_step(model, ...)``) gets
``_tern_train_state(model)``. ``optimizer.build(...)`` goes (the optax state is made on
first use); ``optimizer.iterations`` reads the saved step count and
``optimizer.learning_rate`` Keras' rate for the next update at that count
(``optimizer.learning_rate_at(_tern_iterations(optimizer))``, support/KerasOptimizer.py).

An optimizer applied to a test's own variables works the same way::

    v = tf.Variable([1.0, 2.0])               ->  v = _TernVariable([1.0, 2.0])
    optimizer.apply_gradients([(g, v)])       ->  _tern_apply_gradients(optimizer, [(g, v)])

``_TernVariable`` holds an array the update replaces (read it with ``np.asarray`` or
``.numpy()``); ``_tern_apply_gradients`` keeps the optax state and step count in the same
registry as ``_tern_train``. Any ``X.apply_gradients(pairs)`` in a test is Keras' (flax's
TrainState takes ``grads=`` by keyword). Optimizers are the names a test assigns from
``keras.optimizers.X(...)`` or from a package function that returns one.

``optimizer.variables`` becomes ``_tern_optimizer_variables(optimizer)``: Keras' list, read
from the saved optax state as NumPy arrays. Keras lists ``iterations``, the learning rate
(a variable unless a schedule gives it), then the slots its ``build`` made: per
``add_optimizer_variables`` call, for each trainable variable in turn, one slot of each
name (Adam interleaves momentum and velocity; RMSprop lists all velocities, then all
momentums). The optax state says which Keras optimizer it is (its per-parameter states,
``_TERN_KERAS_SLOTS``); an unknown one raises NotImplementedError rather than give a list
of another length. A model's parameters are ordered by its Keras weight order, a test's own
variables as first applied. Before the first update Keras' list depends on whether
``build`` ran (the translation drops it), so only a slotless optimizer answers then. Where
Flax layouts differ from Keras' (``get_weights`` is not translated either), a TODO stays.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.rule import Rule
from tern_rules.testing.module_calls import layout_layers, package_reaches, assigned_pairs, remember_tuple_return
from tern.features.training import TrainingFacts


OPTIMIZER_API = ("the Keras optimizer is an optax transformation here; its state lives in the train state of a "
                 "translated step (read with _tern_iterations and _tern_optimizer_variables), and other optimizer "
                 "API has no counterpart yet")
#: ``tf.Variable`` arguments a test variable keeps or drops (anything else: a TODO with the reason)
VARIABLE_PARAMS = ("initial_value", "trainable", "validate_shape", "caching_device", "name", "variable_def", "dtype")


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

    def leave_function(self, ctx, original, updated):
        remember_tuple_return(ctx, original)  # for this rule and module_calls.py (order 80)
        return None

    def leave_statement(self, ctx, original, updated):
        for small in original.body:
            if not isinstance(small, cst.Assign):
                continue
            value = small.value
            for target in small.targets:  # `g_opt, d_opt = make_optimizers()`
                if isinstance(target.target, (cst.Tuple, cst.List)) and m.matches(value, m.Call(func=m.Name())) \
                        and ctx.package.fact(TrainingFacts).optimizer_tuple_factories.get(value.func.value) == len(target.target.elements):
                    _optimizers(ctx).update(e.value.value for e in target.target.elements if isinstance(e.value, cst.Name))
            for target, value in assigned_pairs(small, ctx):
                name = (ctx.resolve(value.func) or "") if isinstance(value, cst.Call) else ""
                factory = isinstance(value, cst.Call) and isinstance(value.func, cst.Name) \
                    and value.func.value in ctx.package.fact(TrainingFacts).optimizer_factories
                if isinstance(target, cst.Name) and (name.startswith("keras.optimizers.") or factory):
                    _optimizers(ctx).add(target.value)
        if len(original.body) == 1 and original.body[0].__class__ is cst.Expr and _builds_for_variables(original.body[0].value):
            return cst.RemovalSentinel.REMOVE  # optax state is created with the train state
        return None

    def leave_call(self, ctx, original, updated):
        func = original.func
        if _is_keras_apply_gradients(original):
            return cst.Call(cst.Name("_tern_apply_gradients"), [
                cst.Arg(updated.func.value, comma=_comma()), updated.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)])
        if ctx.resolve(func) == "tensorflow.Variable":
            return self._variable(ctx, updated)
        if func.__class__ is cst.Attribute and func.value.__class__ is cst.Name and func.value.value in _optimizers(ctx) \
                and func.attr.value != "build":
            ctx.todo(f"keras.optimizers.Optimizer.{func.attr.value}", OPTIMIZER_API)
            return updated.with_changes(func=original.func)  # not the attribute leave_attribute reads
        if not isinstance(original.func, cst.Name):
            return None
        sig = ctx.package.fact(TrainingFacts).steps.get(original.func.value)
        if sig is None:
            return None
        if sig.pairs and sig.updates:
            return self._train_many(ctx, updated, sig)
        model = _arg(updated, sig, sig.model)
        if model is None:
            return None
        args = list(updated.args)
        state_arg = model[1].with_changes(value=cst.Name("state"))
        if not sig.updates:
            optimizer = _arg(updated, sig, sig.optimizer) if sig.optimizer else None  # a checkpointer's
            if sig.optimizer and optimizer is None:
                return None
            state_args = [cst.Arg(model[1].value)]
            if optimizer is not None:
                state_args = [cst.Arg(model[1].value, comma=_comma()), cst.Arg(optimizer[1].value)]
            args[model[0]] = model[1].with_changes(value=cst.Call(cst.Name("_tern_train_state"), state_args))
            if optimizer is not None:
                args = [a for i, a in enumerate(args) if i != optimizer[0]]
                args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated.with_changes(args=args)
        optimizer = None if sig.builds else _arg(updated, sig, sig.optimizer)
        if optimizer is None and not sig.builds:
            return None
        args[model[0]] = state_arg
        if optimizer is not None:
            args = [a for i, a in enumerate(args) if i != optimizer[0]]
        if args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        run = cst.Lambda(cst.Parameters([cst.Param(cst.Name("state"))]), updated.with_changes(args=args))
        held = cst.Name("None") if optimizer is None else optimizer[1].value  # a builder makes its own
        return cst.Call(cst.Name("_tern_train"), [
            cst.Arg(model[1].value, comma=_comma()), cst.Arg(held, comma=_comma()), cst.Arg(run)])

    def _train_many(self, ctx, updated, sig):
        """``step(g, c, g_opt, c_opt, x)`` -> ``_tern_train_many(((g, g_opt), (c, c_opt)), lambda g_state,
        c_state: step(g_state, c_state, x))``: one train state per (model, optimizer) pair."""
        found = [(_arg(updated, sig, model), _arg(updated, sig, optimizer)) for _, model, optimizer in sig.states]
        if any(m_arg is None or o_arg is None for m_arg, o_arg in found):
            return None
        states = {m_arg[0]: state for (m_arg, _), (state, _, _) in zip(found, sig.states)}
        drop = {o_arg[0] for _, o_arg in found}
        args = [a.with_changes(value=cst.Name(states[i])) if i in states else a
                for i, a in enumerate(updated.args) if i not in drop]
        if args:
            args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        states = [state for state, _, _ in sig.states]
        params = cst.Parameters([cst.Param(cst.Name(s), comma=_comma() if i < len(states) - 1 else cst.MaybeSentinel.DEFAULT)
                                 for i, s in enumerate(states)])
        run = cst.Lambda(params, updated.with_changes(args=args))
        pairs = cst.Tuple([cst.Element(cst.Tuple([cst.Element(m_arg[1].value, comma=_comma()), cst.Element(o_arg[1].value)]),
                                       comma=_comma() if i < len(found) - 1 else cst.MaybeSentinel.DEFAULT)
                           for i, (m_arg, o_arg) in enumerate(found)])
        return cst.Call(cst.Name("_tern_train_many"), [cst.Arg(pairs, comma=_comma()), cst.Arg(run)])

    def leave_attribute(self, ctx, original, updated):
        if not (isinstance(original.value, cst.Name) and original.value.value in _optimizers(ctx)):
            return None
        if original.attr.value == "iterations":
            return cst.Call(cst.Name("_tern_iterations"), [cst.Arg(updated.value)])
        if original.attr.value == "learning_rate":  # Keras' rate for the next update (support/KerasOptimizer.py)
            steps = cst.Call(cst.Name("_tern_iterations"), [cst.Arg(updated.value)])
            return cst.Call(cst.Attribute(updated.value, cst.Name("learning_rate_at")), [cst.Arg(steps)])
        if original.attr.value == "variables":
            return self._variables_of(ctx, updated)
        if original.attr.value != "build":
            ctx.todo(f"keras.optimizers.Optimizer.{original.attr.value}", OPTIMIZER_API)
        return None

    def _variables_of(self, ctx, updated):
        """``optimizer.variables`` -> ``_tern_optimizer_variables(optimizer)`` (Keras' order, read from the
        optax state); a TODO where the slots would have Flax layouts Keras' weights do not have."""
        if ctx.rule_state.get("layout_layer_seen") or package_reaches(ctx, layout_layers(ctx)):
            ctx.todo("keras.optimizers.Optimizer.variables", "the models here hold layers whose Flax weights have "
                     "another layout than Keras' (a reshaped or transposed kernel), and so would the optimizer's slots")
            return None
        return cst.Call(cst.Name("_tern_optimizer_variables"), [cst.Arg(updated.value)])

    def _variable(self, ctx, updated):
        """``tf.Variable(value, dtype=d)`` -> ``_TernVariable(value, dtype=d)``; ``name`` and the
        default ``trainable=True``/``validate_shape=True`` go (no effect on values); anything
        else is a TODO."""
        value, dtype = None, None
        for i, arg in enumerate(updated.args):
            param = arg.keyword.value if arg.keyword is not None else (
                VARIABLE_PARAMS[i] if i < len(VARIABLE_PARAMS) and not arg.star else "*")
            if param == "name" or (param in ("trainable", "validate_shape") and m.matches(arg.value, m.Name("True"))):
                continue
            if param == "initial_value":
                value = arg.value
            elif param == "dtype":
                dtype = arg.value
            else:
                ctx.todo("tf.Variable", f"argument `{param}`: a test's variable becomes an array the translated "
                         "optimizer replaces in place (_TernVariable), which has no counterpart for it")
                return None
        if value is None:
            ctx.todo("tf.Variable", "no initial value")
            return None
        args = [cst.Arg(value)]
        if dtype is not None:
            args[0] = args[0].with_changes(comma=_comma())
            args.append(cst.Arg(dtype, keyword=cst.Name("dtype"), equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))))
        return cst.Call(cst.Name("_TernVariable"), args)


def _is_keras_apply_gradients(call: cst.Call) -> bool:
    """``X.apply_gradients(pairs)``: Keras' form (one positional argument); flax's TrainState
    takes ``grads=`` by keyword, so a positional call in a test can only be a Keras optimizer's."""
    return (call.func.__class__ is cst.Attribute and call.func.attr.value == "apply_gradients" and len(call.args) == 1
            and call.args[0].keyword is None and not call.args[0].star)


def _builds_for_variables(value: cst.BaseExpression) -> bool:
    """``<x>.build(<y>.trainable_variables)`` (or ``trainable_weights``): an optimizer built for a
    model's variables (asked of every expression statement: no matcher)."""
    if value.__class__ is not cst.Call or value.func.__class__ is not cst.Attribute or value.func.attr.value != "build":
        return False
    if len(value.args) != 1:
        return False
    arg = value.args[0].value
    return arg.__class__ is cst.Attribute and arg.attr.value in ("trainable_variables", "trainable_weights")


RULE = TrainStateCallsRule()
