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

from tern.rule import Rule
from tern.translate import insert_after_imports
from tern_rules.testing.module_calls import (_layout_layers, _package_reaches, assigned_pairs, remember_tuple_return,
                                             runtime_statements)

RUNTIME = '''

_TERN_TRAINING = {}


def _tern_train_state(module, optimizer=None):
    """The module's variables (and the optimizer's state for them) as one KerasTrainState."""
    if id(module) not in _TERN_VARIABLES and getattr(module, "tern_input_specs", None) is None:
        raise ValueError("the model has no variables yet (Keras built it from its Input): call it once before training")
    tx = optax.identity() if optimizer is None else optimizer
    state = KerasTrainState.of_module(module, _tern_variables(module), tx)
    saved = _TERN_TRAINING.get(id(optimizer))
    if optimizer is not None and saved is not None:
        state = state.replace(step=saved[1], opt_state=saved[2], rng=saved[3])
    return state


def _tern_train(module, optimizer, run):
    """``run(state)`` returns the next state and a result; keep the state in place, as Keras does."""
    state, out = run(_tern_train_state(module, optimizer))
    _TERN_VARIABLES[id(module)] = (module, state.variables())
    if optimizer is not None:  # None: the function made its own optimizer, which the caller never holds
        _TERN_TRAINING[id(optimizer)] = (optimizer, state.step, state.opt_state, state.rng)
    return out


def _tern_iterations(optimizer):
    """Keras' ``optimizer.iterations``: the updates applied so far."""
    saved = _TERN_TRAINING.get(id(optimizer))
    return 0 if saved is None else saved[1]
'''

MANY = '''

def _tern_train_many(pairs, run):
    """``run(*states)`` returns the next state of every (model, optimizer) pair and a result: keep them in place."""
    states = []
    for i, (module, optimizer) in enumerate(pairs):
        state = _tern_train_state(module, optimizer)
        if id(optimizer) not in _TERN_TRAINING:  # a fresh state: a key of its own (Keras' one generator differs per draw)
            state = state.replace(rng=jax.random.fold_in(state.rng, i))
        states.append(state)
    *states, out = run(*states)
    for (module, optimizer), state in zip(pairs, states):
        _TERN_VARIABLES[id(module)] = (module, state.variables())
        _TERN_TRAINING[id(optimizer)] = (optimizer, state.step, state.opt_state, state.rng)
    return out
'''

VARIABLES = '''

class _TernVariable(KerasVariable):
    """A test's ``tf.Variable``: an array of its own that ``_tern_apply_gradients`` (or ``assign``) replaces."""

    def __init__(self, initial_value, dtype=None):
        self._array = jnp.asarray(initial_value, dtype)
        super().__init__(lambda: self._array, self._store)

    def _store(self, value):
        self._array = value

    def __repr__(self):
        return f"_TernVariable({self._array!r})"


_TERN_APPLIED = {}


def _tern_apply_gradients(optimizer, grads_and_vars):
    """Keras' ``optimizer.apply_gradients(pairs)``: one optax update of the variables, in place.

    The optimizer's state and step count are kept where ``_tern_train`` keeps them, so
    ``_tern_iterations`` and the learning rate read them; like Keras, an optimizer updates
    the variables it was first applied to, and no others.
    """
    grads, variables = zip(*grads_and_vars)
    params = [v.value for v in variables]
    saved = _TERN_TRAINING.get(id(optimizer))
    if saved is None:
        saved = (optimizer, 0, optimizer.init(params), jax.random.key(0))
        _TERN_APPLIED[id(optimizer)] = tuple(id(v) for v in variables)
    elif _TERN_APPLIED.get(id(optimizer)) != tuple(id(v) for v in variables):
        raise ValueError("the optimizer was built for other variables (Keras: Unknown variable)")
    grads = [jnp.asarray(g, p.dtype) for g, p in zip(grads, params)]
    updates, opt_state = optimizer.update(grads, saved[2], params)
    for variable, value in zip(variables, optax.apply_updates(params, updates)):
        variable.assign(value)
    _TERN_TRAINING[id(optimizer)] = (optimizer, saved[1] + 1, opt_state, saved[3])
    return saved[1] + 1
'''

OPTIMIZER_VARIABLES = '''

#: The optax states holding per-parameter trees, by type in chain order -> Keras' slot variables:
#: one list per ``add_optimizer_variables`` call of the Keras optimizer's ``build`` (which makes,
#: for each trainable variable in turn, one slot of each name), as (Keras name, index of the
#: state, its field, sign). Checked against Keras 3 in tests/test_training_tables.py.
_TERN_KERAS_SLOTS = {
    (): [],  # SGD without momentum
    ("TraceState",): [[("momentum", 0, "trace", 1)]],  # SGD: m = momentum * m - lr * g
    ("ScaleByAdamState",): [[("momentum", 0, "mu", 1), ("velocity", 0, "nu", 1)]],  # Adam, AdamW
    ("ScaleByAmsgradState",): [
        [("momentum", 0, "mu", 1), ("velocity", 0, "nu", 1)], [("velocity_hat", 0, "nu_max", 1)]],
    ("ScaleByRmsState",): [[("velocity", 0, "nu", 1)]],  # RMSprop
    # Keras' RMSprop momentum accumulates +lr * g / rms; optax's trace follows the negated learning rate
    ("ScaleByRmsState", "TraceState"): [[("velocity", 0, "nu", 1)], [("momentum", 1, "trace", -1)]],
    ("ScaleByRStdDevState",): [[("velocity", 0, "nu", 1)], [("average_gradient", 0, "mu", 1)]],
    ("ScaleByRStdDevState", "TraceState"): [
        [("velocity", 0, "nu", 1)], [("momentum", 1, "trace", -1)], [("average_gradient", 0, "mu", 1)]],
    ("ScaleByRssState",): [[("accumulator", 0, "sum_of_squares", 1)]],  # Adagrad
    ("ScaleByAdaDeltaState",): [[("accumulated_grad", 0, "e_g", 1), ("accumulated_delta_var", 0, "e_x", 1)]],
    ("ScaleByLionState",): [[("momentum", 0, "mu", 1)]],
}
#: states that hold others (inject_hyperparams; multi_transform and masking, for frozen layers)
_TERN_WRAPPER_STATES = {"InjectHyperparamsState": "inner_state", "InjectStatefulHyperparamsState": "inner_state",
                        "MaskedState": "inner_state", "PartitionState": "inner_states"}
_TERN_SLOTLESS_STATES = {"EmptyState", "ScaleByScheduleState"}


def _tern_optimizer_variables(optimizer):
    """Keras' ``optimizer.variables``: ``iterations``, the learning rate (unless a schedule gives it)
    and the optimizer's slots for each trainable variable, in Keras' order, as NumPy arrays read now."""
    saved = _TERN_TRAINING.get(id(optimizer))
    states = _tern_slot_states(optimizer.init([]) if saved is None else saved[2])
    names = tuple(type(s).__name__ for s in states)
    recipe = _TERN_KERAS_SLOTS.get(names)
    if recipe is None:
        raise NotImplementedError(
            f"optimizer.variables: tern does not know Keras' variables of an optimizer whose optax state holds "
            f"{', '.join(names)} (Keras' Adamax and Nadam among them: their slots were not checked against Keras)")
    if saved is None and recipe:
        raise ValueError(
            "optimizer.variables before the optimizer's first update: Keras lists [iterations, learning_rate] "
            "until the optimizer is built and adds its zero slots then; the translation cannot tell which "
            "(read it after a step)")
    out = [np.asarray(0 if saved is None else saved[1], np.int64)]
    if not callable(optimizer.learning_rate):
        out.append(np.asarray(optimizer.learning_rate, np.float32))
    for group in recipe:
        _, first, first_field, _ = group[0]  # every slot of a group is a tree over the same parameters
        for path in _tern_parameter_order(getattr(states[first], first_field)):
            for _, index, field, sign in group:
                value = getattr(states[index], field)
                for key in path:
                    value = value[key]
                if not isinstance(value, optax.MaskedNode):  # a frozen layer's: Keras' optimizer never had it
                    out.append(np.asarray(value) if sign > 0 else -np.asarray(value))
    return out


def _tern_slot_states(state):
    """The parts of an optax state that hold per-parameter trees, in chain order (wrappers opened)."""
    name = type(state).__name__
    if name in _TERN_WRAPPER_STATES:
        inner = getattr(state, _TERN_WRAPPER_STATES[name])
        parts = inner.values() if hasattr(inner, "values") else [inner]
        return [s for part in parts for s in _tern_slot_states(part)]
    if name in _TERN_SLOTLESS_STATES:
        return []
    if type(state) is tuple:  # a chain
        return [s for part in state for s in _tern_slot_states(part)]
    return [state]


def _tern_parameter_order(tree):
    """The keys of ``tree`` (per-parameter values) in the order Keras built its slots: a test's own
    variables in the order first applied, a model's trainable variables in its weight order."""
    if isinstance(tree, (list, tuple)):
        return [(i,) for i in range(len(tree))]

    def leaf_paths(node, path=()):
        if not hasattr(node, "items"):
            return [path]
        return [p for key, value in node.items() for p in leaf_paths(value, (*path, key))]

    wanted = set(leaf_paths(tree))
    orders = {tuple(p[1:] for p in order if p[0] == "params")
              for key, order in _TERN_ORDER.items() if key in _TERN_VARIABLES}
    orders = [order for order in orders if set(order) == wanted]
    if len(orders) != 1:
        raise ValueError(f"optimizer.variables: {len(orders)} models of this file have the parameters the optimizer "
                         "updates, so Keras' order of its slots is not known")
    return orders[0]
'''


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
                        and ctx.package.optimizer_tuple_factories.get(value.func.value) == len(target.target.elements):
                    _optimizers(ctx).update(e.value.value for e in target.target.elements if isinstance(e.value, cst.Name))
            for target, value in assigned_pairs(small, ctx):
                name = (ctx.resolve(value.func) or "") if isinstance(value, cst.Call) else ""
                factory = isinstance(value, cst.Call) and m.matches(value.func, m.Name()) \
                    and value.func.value in ctx.package.optimizer_factories
                if isinstance(target, cst.Name) and (name.startswith("keras.optimizers.") or factory):
                    _optimizers(ctx).add(target.value)
        if len(original.body) == 1 and m.matches(original.body[0], m.Expr(value=m.Call(
                func=m.Attribute(attr=m.Name("build")),
                args=[m.Arg(value=m.Attribute(attr=m.Name("trainable_variables") | m.Name("trainable_weights")))]))):
            return cst.RemovalSentinel.REMOVE  # optax state is created with the train state
        return None

    def leave_call(self, ctx, original, updated):
        func = original.func
        if _is_keras_apply_gradients(original):
            self._need_runtime(ctx, variables=True)
            return cst.Call(cst.Name("_tern_apply_gradients"), [
                cst.Arg(updated.func.value, comma=_comma()), updated.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)])
        if ctx.resolve(func) == "tensorflow.Variable":
            return self._variable(ctx, updated)
        if m.matches(func, m.Attribute(value=m.Name())) and func.value.value in _optimizers(ctx) and func.attr.value != "build":
            ctx.todo(f"keras.optimizers.Optimizer.{func.attr.value}", OPTIMIZER_API)
            return updated.with_changes(func=original.func)  # not the attribute leave_attribute reads
        if not isinstance(original.func, cst.Name):
            return None
        sig = ctx.package.train.get(original.func.value)
        if sig is None:
            return None
        if sig.pairs and sig.updates:
            return self._train_many(ctx, updated, sig)
        model = _arg(updated, sig, sig.model)
        if model is None:
            return None
        self._need_runtime(ctx)
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
        self._need_runtime(ctx, many=True)
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
            self._need_runtime(ctx)
            return cst.Call(cst.Name("_tern_iterations"), [cst.Arg(updated.value)])
        if original.attr.value == "learning_rate":  # Keras' rate for the next update (support/KerasOptimizer.py)
            self._need_runtime(ctx)
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
        if ctx.rule_state.get("layout_layer_seen") or _package_reaches(ctx, _layout_layers(ctx)):
            ctx.todo("keras.optimizers.Optimizer.variables", "the models here hold layers whose Flax weights have "
                     "another layout than Keras' (a reshaped or transposed kernel), and so would the optimizer's slots")
            return None
        self._need_runtime(ctx)
        ctx.rule_state["optimizer_variables_runtime"] = True
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
        self._need_runtime(ctx, variables=True)
        return cst.Call(cst.Name("_TernVariable"), args)

    @staticmethod
    def _need_runtime(ctx, variables=False, many=False):
        ctx.rule_state["runtime"] = True  # module_calls.py's registry
        ctx.rule_state["train_runtime"] = True
        if variables:
            ctx.rule_state["variable_runtime"] = True
            ctx.support.add("KerasVariable")
        if many:
            ctx.rule_state["many_runtime"] = True
        ctx.support.add("KerasTrainState")

    def leave_module(self, ctx, updated):
        if not ctx.rule_state.get("train_runtime"):
            return None
        ctx.plan.spell("optax")
        text = RUNTIME + (MANY if ctx.rule_state.get("many_runtime") else "") + (
            VARIABLES if ctx.rule_state.get("variable_runtime") else "")
        text += OPTIMIZER_VARIABLES if ctx.rule_state.get("optimizer_variables_runtime") else ""
        return insert_after_imports(updated, runtime_statements(text))


def _is_keras_apply_gradients(call: cst.Call) -> bool:
    """``X.apply_gradients(pairs)``: Keras' form (one positional argument); flax's TrainState
    takes ``grads=`` by keyword, so a positional call in a test can only be a Keras optimizer's."""
    return (m.matches(call.func, m.Attribute(attr=m.Name("apply_gradients"))) and len(call.args) == 1
            and call.args[0].keyword is None and not call.args[0].star)


RULE = TrainStateCallsRule()
