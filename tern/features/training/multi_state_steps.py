"""Training steps that update several models, each with its own optimizer (a GAN's generator and critic).

Each (model, optimizer) pair becomes a train state of its own, ``<model>_state``, in the
model's place; the optimizers go. Every ``with tf.GradientTape() as t:`` block followed, in
the same block, by ``g = t.gradient(loss, M.trainable_variables)`` and
``O.apply_gradients(zip(g, M.trainable_variables))`` becomes a loss function of ``M``'s
params, ``jax.value_and_grad`` of it and ``M_state.apply_gradients``; tapes may stand in
loops (``for _ in range(n_critic)``). Inside a loss function the differentiated model is
its state with the traced params (``M = M_state.replace(params=M_params)``); any other
model call reads its state (``predict``), so a model that keeps moving statistics
refuses such a call at run time rather than losing the update. The step returns
``(M1_state, M2_state, ..., what it returned)``.

Decided here on Python's ``ast`` (like ``train_steps.py``); the rewrite is
``rules/structure/multi_state_step.py``. ``tf.random`` draws in the step take the key of
the state whose tape comes next (``draw_state``).
"""

from __future__ import annotations

import ast

from tern.engine.ast_walks import own_nodes, walk as ast_walk
from tern.engine.names import ast_tail
from tern.features.training.step_syntax import TRAINABLE, arg_at, hoist_refusal, is_build, is_tape, nested_use, passing_calls, positional, sig_name, trainable_of, TrainSig



def state_name(model: str) -> str:
    return f"{model}_state"


def _blocks(fn: ast.FunctionDef):
    """Every statement list of ``fn``'s own body (loops, branches, ``with`` bodies included)."""
    todo = [fn.body]
    while todo:
        block = todo.pop()
        yield block
        for stmt in block:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    todo.append(inner)


def _apply_pair(stmt: ast.stmt) -> tuple[str, str, str] | None:
    """``O.apply_gradients(zip(g, M.trainable_variables))`` -> (O, g, M)."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and ast_tail(stmt.value.func) == "apply_gradients"):
        return None
    call = stmt.value
    if not (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and len(call.args) == 1
            and not call.keywords):
        return None
    pairs = call.args[0]
    if not (isinstance(pairs, ast.Call) and ast_tail(pairs.func) == "zip" and len(pairs.args) == 2
            and isinstance(pairs.args[0], ast.Name) and isinstance(pairs.args[1], ast.Attribute)
            and pairs.args[1].attr in TRAINABLE and isinstance(pairs.args[1].value, ast.Name)):
        return None
    return call.func.value.id, pairs.args[0].id, pairs.args[1].value.id


def _gradient(stmt: ast.stmt, tape: str, grads: str, model: str) -> str | None:
    """The loss of ``grads = tape.gradient(loss, model.trainable_variables)``, if ``stmt`` is that."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == grads and isinstance(stmt.value, ast.Call)):
        return None
    call = stmt.value
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "gradient" and ast_tail(call.func.value) == tape
            and len(call.args) == 2 and not call.keywords and isinstance(call.args[0], ast.Name)
            and trainable_of(call.args[1], model)):
        return None
    return call.args[0].id


class Tape:
    """One training tape of a multi-state step, as the rewrite needs it."""

    def __init__(self, model, optimizer, loss, grads, tape, with_node, loops):
        self.model, self.optimizer, self.loss, self.grads, self.tape = model, optimizer, loss, grads, tape
        self.with_node = with_node
        self.loops = loops  # source-order indices of the loops around the tape (innermost last)


def _loops(fn: ast.FunctionDef) -> list[ast.stmt]:
    return sorted((n for n in own_nodes(fn) if isinstance(n, (ast.For, ast.While))), key=lambda n: (n.lineno, n.col_offset))


def _enclosing_loops(fn, node) -> tuple[int, ...]:
    return tuple(i for i, loop in enumerate(_loops(fn))
                 if any(n is node for s in loop.body for n in ast_walk(s)))


def tapes(fn: ast.FunctionDef) -> tuple[list[Tape], str | None]:
    """The training tapes of ``fn`` in source order, or the reason one is not of the translated shape."""
    found: list[Tape] = []
    for block in _blocks(fn):
        for i, stmt in enumerate(block):
            pair = _apply_pair(stmt)
            if pair is None:
                continue
            optimizer, grads, model = pair
            grad_at = [j for j in range(i) if _gradient_any(block[j], grads, model)]
            if len(grad_at) != 1:
                return [], (f"`{optimizer}.apply_gradients` must follow `{grads} = tape.gradient(loss, "
                            f"{model}.trainable_variables)` in the same block")
            j = grad_at[0]
            tape = ast_tail(block[j].value.func.value)
            withs = [k for k in range(j) if isinstance(block[k], ast.With) and len(block[k].items) == 1
                     and is_tape(block[k].items[0].context_expr)
                     and isinstance(block[k].items[0].optional_vars, ast.Name)
                     and block[k].items[0].optional_vars.id == tape]
            if not withs:
                return [], f"the tape `{tape}` is not a `with` block just before its gradient"
            k = withs[-1]
            with_node = block[k]
            call = with_node.items[0].context_expr
            if call.args or call.keywords:
                return [], "tf.GradientTape(persistent=..., watch_accessed_variables=...): not translated yet"
            if any(isinstance(n, ast.With) and any(is_tape(it.context_expr) for it in n.items)
                   for s in with_node.body for n in ast_walk(s)):
                return [], "a tape inside a training tape: move the inner one into a function (e.g. a gradient penalty)"
            between = block[j + 1:i]
            if any(grads in {n.id for n in ast_walk(s) if isinstance(n, ast.Name)} for s in between):
                return [], f"the gradients `{grads}` are changed before apply_gradients: not translated yet"
            loss = _gradient(block[j], tape, grads, model)
            found.append(Tape(model, optimizer, loss, grads, tape, with_node, _enclosing_loops(fn, with_node)))
    found.sort(key=lambda t: (t.with_node.lineno, t.with_node.col_offset))
    return found, None


def _gradient_any(stmt, grads, model) -> bool:
    return (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Attribute)
            and stmt.value.func.attr == "gradient" and _gradient(stmt, ast_tail(stmt.value.func.value), grads, model) is not None)


def multi_step(fn: ast.FunctionDef, sigs: dict[str, TrainSig]) -> tuple[TrainSig | None, str | None]:
    """A step over several (model, optimizer) pairs, or the reason it is not translated."""
    found, reason = tapes(fn)
    if reason:
        return None, reason
    pairs = {(t.model, t.optimizer) for t in found}
    if len(pairs) < 2:
        return None, None
    if sum(isinstance(n, ast.With) and any(is_tape(i.context_expr) for i in n.items) for n in own_nodes(fn)) != len(found):
        return None, "a tape other than the training tapes in the step: move it into a function (e.g. a gradient penalty)"
    params = positional(fn)
    if params is None:
        return None, "the step takes *args, **kwargs or positional-only parameters"
    models = [m for m, _ in pairs]
    optimizers = [o for _, o in pairs]
    if len(set(models)) != len(pairs) or len(set(optimizers)) != len(pairs) or set(models) & set(optimizers):
        return None, "a model updated by two optimizers, or an optimizer updating two models: not translated"
    if not all(m in params and o in params for m, o in pairs):
        return None, "the models and optimizers are not all parameters of the step"
    names = set(models) | set(optimizers)
    nested = nested_use(fn, names)
    if nested:
        return None, f"`{nested}` is used inside a nested function or lambda of the step"
    if any(isinstance(n, ast.Name) and n.id in names and not isinstance(n.ctx, ast.Load) for n in ast_walk(fn)):
        return None, "the step rebinds a model or optimizer parameter"
    reason = _uses(fn, found, sigs, set(models), set(optimizers))
    if reason:
        return None, reason
    introduced = {state_name(m) for m in models} | {f"{m}_params" for m in models} | {f"compute_{t.loss}" for t in found}
    taken = sorted(introduced & ({n.id for n in ast_walk(fn) if isinstance(n, ast.Name)} | set(params)))
    if taken:
        return None, f"the step already uses the name `{taken[0]}`, which its translation needs"
    reason = _closure_refusal(fn, found, params)
    if reason:
        return None, reason
    if any(r not in fn.body for r in own_nodes(fn) if isinstance(r, ast.Return)) or any(
            isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own_nodes(fn)):
        return None, "the step returns from inside a block (or yields)"
    ordered = tuple(sorted(pairs, key=lambda p: params.index(p[0])))
    first = ordered[0]
    return TrainSig("step", params, first[0], first[1], pairs=ordered,
                    draws=tuple((state_name(t.model), t.loops) for t in found)), None


def _uses(fn, found: list[Tape], sigs, models: set[str], optimizers: set[str]) -> str | None:
    """Why a model or optimizer is used other than the rewrite handles, if it is."""
    allowed: set[int] = set()
    own = list(own_nodes(fn))
    for node in own:
        if isinstance(node, ast.Expr) and _apply_pair(node):
            call = node.value
            allowed |= {id(call.func.value), id(call.args[0].args[1].value)}
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute) \
                and node.value.func.attr == "gradient" and len(node.value.args) == 2 \
                and isinstance(node.value.args[1], ast.Attribute) and isinstance(node.value.args[1].value, ast.Name):
            allowed.add(id(node.value.args[1].value))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in models:
            training = [k for k in node.keywords if k.arg == "training"]
            if training and not (isinstance(training[0].value, ast.Constant) and training[0].value.value in (True, False)):
                return f"`{node.func.id}` is called with a training flag known only at run time"
            allowed.add(id(node.func))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in sigs \
                and sigs[node.func.id].kind == "reader":
            sig = sigs[node.func.id]
            index = sig.params.index(sig.model)
            arg = next((k.value for k in node.keywords if k.arg == sig.model), None)
            if arg is None and index < len(node.args):
                arg = node.args[index]
            if isinstance(arg, ast.Name) and arg.id in models:
                allowed.add(id(arg))
    for node in own:
        if isinstance(node, ast.Name) and node.id in models | optimizers and id(node) not in allowed:
            return f"`{node.id}` is used for more than calling it, passing it to a reader and its update: not translated yet"
    return None


def _closure_refusal(fn, found: list[Tape], params) -> str | None:
    """A tape body becomes a nested function: a name it assigns must not also be bound outside it."""
    inside = {id(n) for t in found for s in t.with_node.body for n in ast_walk(s)}
    outside = {n.id for n in own_nodes(fn) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
               and id(n) not in inside} | set(params)
    for tape in found:
        stored = {n.id for s in tape.with_node.body for n in ast_walk(s)
                  if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        if tape.loss not in stored:
            return f"the loss `{tape.loss}` is not computed inside its tape"
        clash = sorted(stored & outside)
        if clash:
            return f"`{clash[0]}` is bound both inside a tape and outside it; rename one"
        if any(isinstance(n, (ast.Return, ast.Global, ast.Nonlocal)) for s in tape.with_node.body for n in ast_walk(s)):
            return "a return, global or nonlocal inside a tape"
    return None


def draw_state(sig: TrainSig, tapes_seen: int, in_tape: int | None, loops: tuple[int, ...]) -> str | None:
    """The state whose key a ``tf.random`` draw takes in a multi-state step: the one of the tape it
    stands in, else of the next tape; None when that tape's update does not run in every iteration
    of the loop around the draw (the draw would repeat its key)."""
    index = in_tape if in_tape is not None else tapes_seen
    if index >= len(sig.draws):
        return None
    state, tape_loops = sig.draws[index]
    if loops and loops[-1] not in tape_loops:
        return None
    return state


def multi_threader(fn: ast.FunctionDef, sigs: dict[str, TrainSig]) -> tuple[TrainSig | None, str | None]:
    """A function handing its (model, optimizer) pairs to multi-state steps: it threads every state.

    Each training call becomes ``M1_state, M2_state, r = step(M1_state, M2_state, ...)``;
    ``O.build(M.trainable_variables)`` goes (the optax state is made with the train state).
    """
    params = positional(fn)
    if params is None:
        return None, "*args/**kwargs around the training calls"
    ordered: tuple[tuple[str, str], ...] | None = None
    allowed: set[int] = set()
    for call, sig in passing_calls(fn, sigs):
        if not sig.updates:
            continue
        if not sig.pairs or sig.builds:
            return None, f"`{sig_name(call)}` trains one model next to training calls that train several: not threaded"
        mapped = []
        for model, optimizer in sig.pairs:
            m_arg, o_arg = arg_at(call, sig, model), arg_at(call, sig, optimizer)
            if not (isinstance(m_arg, ast.Name) and isinstance(o_arg, ast.Name)):
                return None, f"`{sig_name(call)}` gets a model or optimizer that is not a plain name"
            allowed |= {id(m_arg), id(o_arg)}
            mapped.append((m_arg.id, o_arg.id))
        if ordered is not None and tuple(mapped) != ordered:
            return None, "training calls that take the models or optimizers in different places"
        ordered = tuple(mapped)
        reason = hoist_refusal(fn, call)
        if reason:
            return None, reason
    names = {n for pair in ordered for n in pair}
    if not names <= set(params):
        return None, "the models and optimizers are not all parameters: building their train states is not translated"
    nested = nested_use(fn, names)
    if nested:
        return None, f"`{nested}` is used inside a nested function or lambda"
    for node in own_nodes(fn):
        if any(is_build(node, m, o) for m, o in ordered):
            allowed |= {id(node.value.func.value), id(node.value.args[0].value)}
    for node in own_nodes(fn):
        if isinstance(node, ast.Name) and node.id in names and id(node) not in allowed:
            return None, f"`{node.id}` is used for more than the training calls: not translated yet"
    used = {n.id for n in ast_walk(fn) if isinstance(n, ast.Name)} | set(params)
    taken = sorted(used & ({state_name(m) for m, _ in ordered}
                           | {f"{sig_name(c)}_result" for c, _ in passing_calls(fn, sigs)}))
    if taken:
        return None, f"the function already uses the name `{taken[0]}`, which its translation needs"
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own_nodes(fn)):
        return None, "a generator"
    ordered = tuple(sorted(ordered, key=lambda p: params.index(p[0])))
    return TrainSig("threader", params, ordered[0][0], ordered[0][1], pairs=ordered,
                    advancing=advancing_loops(fn, sigs)), None


def advancing_loops(fn: ast.FunctionDef, sigs: dict[str, TrainSig]) -> frozenset[int]:
    """Source-order indices of ``fn``'s loops with a training call inside: the state changes every iteration."""
    calls = [c for c, sig in passing_calls(fn, sigs) if sig.updates]
    return frozenset(i for i, loop in enumerate(_loops(fn))
                     if any(n is c for s in loop.body for n in ast_walk(s) for c in calls))
