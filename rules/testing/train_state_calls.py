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
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.rule import Rule
from tern.translate import insert_after_imports
from tern_rules.testing.module_calls import assigned_pairs, remember_tuple_return, runtime_statements

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

VARIABLES = '''

class _TernVariable:
    """A test's ``tf.Variable``: an array that ``_tern_apply_gradients`` (or ``assign``) replaces in place."""

    def __init__(self, initial_value, dtype=None):
        self.value = jnp.asarray(initial_value, dtype)

    def assign(self, value):
        value = jnp.asarray(value, self.value.dtype)
        if value.shape != self.value.shape:
            raise ValueError(f"Cannot assign a value of shape {value.shape} to a variable of shape {self.value.shape}")
        self.value = value
        return self

    def assign_add(self, delta):
        return self.assign(self.value + jnp.asarray(delta))

    def assign_sub(self, delta):
        return self.assign(self.value - jnp.asarray(delta))

    def numpy(self):
        return np.asarray(self.value)

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.value, dtype)

    @property
    def shape(self):
        return self.value.shape

    @property
    def dtype(self):
        return self.value.dtype

    def __repr__(self):
        return f"_TernVariable({self.value!r})"


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


OPTIMIZER_API = ("the Keras optimizer is an optax transformation here; its state lives in the train state of a "
                 "translated step (read with _tern_iterations), and other optimizer API has no counterpart yet")
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
        if original.attr.value != "build":
            ctx.todo(f"keras.optimizers.Optimizer.{original.attr.value}", OPTIMIZER_API)
        return None

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
    def _need_runtime(ctx, variables=False):
        ctx.rule_state["runtime"] = True  # module_calls.py's registry
        ctx.rule_state["train_runtime"] = True
        if variables:
            ctx.rule_state["variable_runtime"] = True
        ctx.support.add("KerasTrainState")

    def leave_module(self, ctx, updated):
        if not ctx.rule_state.get("train_runtime"):
            return None
        ctx.plan.spell("optax")
        text = RUNTIME + (VARIABLES if ctx.rule_state.get("variable_runtime") else "")
        return insert_after_imports(updated, runtime_statements(text))


def _is_keras_apply_gradients(call: cst.Call) -> bool:
    """``X.apply_gradients(pairs)``: Keras' form (one positional argument); flax's TrainState
    takes ``grads=`` by keyword, so a positional call in a test can only be a Keras optimizer's."""
    return (m.matches(call.func, m.Attribute(attr=m.Name("apply_gradients"))) and len(call.args) == 1
            and call.args[0].keyword is None and not call.args[0].star)


RULE = TrainStateCallsRule()
