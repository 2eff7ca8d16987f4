"""Training in translated tests: Keras models and optimizers keep their state in place.

A translated step takes a train state and returns the next one; a test written for Keras
holds a model and an optimizer that change as it trains. ``_tern_train(model, optimizer,
run)`` builds the state from the registry, runs the step and keeps what it returns, so the
test reads the model and ``optimizer.iterations`` as Keras would show them.
"""

import jax
import numpy
import optax

from .KerasTrainState import KerasTrainState
from .KerasVariable import KerasVariable
from .registry import _TERN_ORDER, _TERN_VARIABLES, _tern_variables


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


class _TernVariable(KerasVariable):
    """A test's ``tf.Variable``: an array of its own that ``_tern_apply_gradients`` (or ``assign``) replaces."""

    def __init__(self, initial_value, dtype=None):
        self._array = jax.numpy.asarray(initial_value, dtype)
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
    grads = [jax.numpy.asarray(g, p.dtype) for g, p in zip(grads, params)]
    updates, opt_state = optimizer.update(grads, saved[2], params)
    for variable, value in zip(variables, optax.apply_updates(params, updates)):
        variable.assign(value)
    _TERN_TRAINING[id(optimizer)] = (optimizer, saved[1] + 1, opt_state, saved[3])
    return saved[1] + 1


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
    out = [numpy.asarray(0 if saved is None else saved[1], numpy.int64)]
    if not callable(optimizer.learning_rate):
        out.append(numpy.asarray(optimizer.learning_rate, numpy.float32))
    for group in recipe:
        _, first, first_field, _ = group[0]  # every slot of a group is a tree over the same parameters
        for path in _tern_parameter_order(getattr(states[first], first_field)):
            for _, index, field, sign in group:
                value = getattr(states[index], field)
                for key in path:
                    value = value[key]
                if not isinstance(value, optax.MaskedNode):  # a frozen layer's: Keras' optimizer never had it
                    out.append(numpy.asarray(value) if sign > 0 else -numpy.asarray(value))
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
        raise ValueError(f"optimizer.variables: {len(orders)} models in the registry have the parameters the optimizer "
                         "updates, so Keras' order of its slots is not known")
    return orders[0]
