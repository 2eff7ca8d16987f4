"""Which package functions are training steps, and which pass a model's state along.

A Keras training step mutates a model and an optimizer; its JAX translation is pure: it
takes a train state where the model was, drops the optimizer (it lives in the state) and
returns ``(state, what it returned)``. Every caller must then pass the state and rebind
it, so the decision is package-wide and made once, here, on Python's ``ast``:

- a **step** is a top-level function with one ``tf.GradientTape()`` block, one
  ``grads = tape.gradient(loss, M.trainable_variables)`` and one
  ``O.apply_gradients(zip(grads, M.trainable_variables))``, M and O parameters;
- a **threader** passes two of its parameters as a step's (or threader's) model and
  optimizer, and uses them for nothing else (``O.build(M.trainable_variables)`` aside,
  and reads of ``O.learning_rate`` / ``O.iterations``, which the state answers): it
  threads the state the same way;
  A threader may also make its optimizer itself (``optimizer = make_optimizer()``, then
  ``optimizer.build(model.trainable_variables)``): it takes the state of the model's
  variables and replaces its optimizer there (``state.with_optimizer(optimizer)``); before
  that line the model is ``state.module``;
- a **reader** only calls a parameter the way Keras calls a model, with a literal
  ``training=`` (``model(x, training=False)``; ``training=True`` for a forward pass in
  training mode that updates nothing, e.g. a gradient penalty) or passes it on as a
  reader's model: it takes the state and reads the variables.

A function that looks like a step but is not one of these shapes gets a refusal: the
reason its TODO gives. The rewrites live in ``rules/structure/gradient_tape_step.py``,
``rules/structure/train_state_callers.py`` and ``rules/testing/train_state_calls.py``.
"""

from __future__ import annotations

import ast

from tern.engine.ast_walks import own_nodes, walk as ast_walk
from tern.features.training import multi_state_steps, train_checkpoints
from tern.engine.names import ast_tail
from tern.features.training.step_syntax import INTRODUCED, SEVERAL_OPTIMIZERS, TRAINABLE, arg_at, hoist_refusal, is_build, is_tape, names_in, nested_use, parent_map, passing_calls, positional, sig_name, trainable_of, TrainSig

def step_refusal(fn: ast.FunctionDef) -> tuple[TrainSig | None, str | None]:
    """``(signature, None)`` for a step tern translates, ``(None, reason)`` for one it cannot,
    ``(None, None)`` for a function that is not a training step at all."""
    own = list(own_nodes(fn))
    tapes = [n for n in own if isinstance(n, ast.With) and any(is_tape(i.context_expr) for i in n.items)]
    applies = [n for n in own if isinstance(n, ast.Call) and ast_tail(n.func) == "apply_gradients"]
    if not tapes or not applies:
        return None, None
    if len(applies) > 1:
        return None, SEVERAL_OPTIMIZERS
    if len(tapes) > 1 or any(is_tape(n) for t in tapes for s in t.body for n in ast_walk(s)):
        return None, ("nested or several tf.GradientTape blocks (e.g. a gradient penalty): not translated yet; "
                      "differentiate an inner function with jax.grad inside the loss function")
    params = positional(fn)
    if params is None:
        return None, "the step takes *args, **kwargs or positional-only parameters"
    tape = tapes[0]
    if tape not in fn.body:
        return None, "the tape is inside a loop, branch or other block"
    if len(tape.items) != 1 or not isinstance(tape.items[0].optional_vars, ast.Name):
        return None, "the tape is not the only item of its `with` or is not bound with `as`"
    call = tape.items[0].context_expr
    if call.args or call.keywords:
        return None, ("tf.GradientTape(persistent=..., watch_accessed_variables=...): a tape used more than once or "
                      "watching only some variables: not translated yet")
    tape_name = tape.items[0].optional_vars.id
    uses = [n for n in own if isinstance(n, ast.Attribute) and ast_tail(n.value) == tape_name and isinstance(n.value, ast.Name)]
    if any(u.attr != "gradient" for u in uses):
        other = next(u.attr for u in uses if u.attr != "gradient")
        return None, (f"tape.{other}: gradients with respect to watched tensors (inputs) are not translated yet; "
                      "jax.grad of a function of those inputs gives them")
    after = fn.body[fn.body.index(tape) + 1:]
    grad_at = [i for i, s in enumerate(after) if isinstance(s, ast.Assign) and isinstance(s.value, ast.Call)
               and isinstance(s.value.func, ast.Attribute) and s.value.func.attr == "gradient"
               and ast_tail(s.value.func.value) == tape_name]
    if len(grad_at) != 1 or len(uses) != 1:
        return None, "tape.gradient must be called once, as `grads = tape.gradient(loss, model.trainable_variables)`"
    grad_stmt = after[grad_at[0]]
    gcall = grad_stmt.value
    if not (len(grad_stmt.targets) == 1 and isinstance(grad_stmt.targets[0], ast.Name) and len(gcall.args) == 2
            and not gcall.keywords and isinstance(gcall.args[0], ast.Name) and isinstance(gcall.args[1], ast.Attribute)
            and gcall.args[1].attr in TRAINABLE and isinstance(gcall.args[1].value, ast.Name)):
        return None, ("tape.gradient of something other than one loss with respect to `model.trainable_variables` "
                      "(e.g. a list of variables or several targets): not translated yet")
    loss, model, grads = gcall.args[0].id, gcall.args[1].value.id, grad_stmt.targets[0].id
    apply = applies[0]
    apply_at = [i for i, s in enumerate(after) if isinstance(s, ast.Expr) and s.value is apply]
    if (len(apply_at) != 1 or apply_at[0] < grad_at[0] or not isinstance(apply.func.value, ast.Name)
            or len(apply.args) != 1 or apply.keywords):
        return None, "optimizer.apply_gradients must be a statement of its own after tape.gradient"
    optimizer = apply.func.value.id
    pairs = apply.args[0]
    if not (isinstance(pairs, ast.Call) and ast_tail(pairs.func) == "zip" and len(pairs.args) == 2
            and isinstance(pairs.args[0], ast.Name) and trainable_of(pairs.args[1], model)):
        return None, "apply_gradients takes something other than zip(grads, model.trainable_variables)"
    if model not in params or optimizer not in params or model == optimizer:
        return None, ("the model and the optimizer are not both parameters of the step (a step over objects it "
                      "creates or reads from globals is not translated yet)")
    current = grads
    for stmt in after[grad_at[0] + 1:apply_at[0]]:
        if current not in names_in(ast_walk(stmt)):
            continue
        if _is_global_norm_clip(stmt, current):
            current = stmt.targets[0].elts[0].id
            continue
        return None, (f"the gradients are changed between tape.gradient and apply_gradients (`{_short(stmt)}`); "
                      "in JAX they are a pytree shaped like the params, not a list: not translated yet")
    if pairs.args[0].id != current:
        return None, "apply_gradients applies other gradients than tape.gradient computed"
    nested = nested_use(fn, (model, optimizer))
    if nested:
        return None, f"`{nested}` is used inside a nested function or lambda of the step"
    if any(isinstance(n, ast.Name) and n.id in (model, optimizer) and not isinstance(n.ctx, ast.Load) for n in ast_walk(fn)):
        return None, "the step rebinds its model or optimizer parameter"
    reason = _model_and_optimizer_uses(fn, tape, model, optimizer, grad_stmt, apply)
    if reason:
        return None, reason
    stored = {n.id for s in tape.body for n in ast_walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if loss not in stored:
        return None, f"the loss `{loss}` is not computed inside the tape"
    before = {n.id for s in fn.body[:fn.body.index(tape)] for n in ast_walk(s)
              if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    clash = sorted(stored & (before | set(params)))
    if clash:
        return None, f"`{clash[0]}` is rebound inside the tape; rename it there first"
    taken = sorted(INTRODUCED & {n.id for n in ast_walk(fn) if isinstance(n, ast.Name)} | (INTRODUCED & set(params)))
    if taken:
        return None, f"the step already uses the name `{taken[0]}`, which its translation needs"
    returns = [n for n in own if isinstance(n, ast.Return)]
    if any(r not in fn.body for r in returns) or any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own):
        return None, "the step returns from inside a block (or yields)"
    return TrainSig("step", params, model, optimizer), None


def _short(node: ast.AST) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= 60 else text[:57] + "..."


def _is_global_norm_clip(stmt: ast.stmt, grads: str) -> bool:
    return (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Tuple)
            and len(stmt.targets[0].elts) == 2 and all(isinstance(e, ast.Name) for e in stmt.targets[0].elts)
            and isinstance(stmt.value, ast.Call) and ast_tail(stmt.value.func) == "clip_by_global_norm"
            and stmt.value.args and isinstance(stmt.value.args[0], ast.Name) and stmt.value.args[0].id == grads)


def _model_and_optimizer_uses(fn, tape, model, optimizer, grad_stmt, apply) -> str | None:
    allowed = {id(grad_stmt.value.args[1]), id(apply.args[0].args[1]), id(apply.func)}
    calls = [n for n in own_nodes(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == model]
    if not calls:
        return "the model is not called inside the tape"
    if len(calls) > 1:
        return "the model is called more than once inside the tape: not translated yet"
    reason = _hoistable(tape, calls[0], fn, model)
    if reason:
        return reason
    allowed.add(id(calls[0].func))
    call_at = next(i for i, st in enumerate(tape.body) if any(n is calls[0] for n in ast_walk(st)))
    for i, st in enumerate(tape.body):
        for node in ast_walk(st):
            if isinstance(node, ast.Attribute) and node.attr == "losses" and isinstance(node.value, ast.Name) \
                    and node.value.id == model and i >= call_at:
                allowed.add(id(node))  # the terms of this forward pass: keras_model_losses(model_state)
    own = list(own_nodes(fn))
    # the names inside the allowed uses: the model call's callee, `M.trainable_variables`, `O.apply_gradients`
    allowed_names = {id(n.value) if isinstance(n, ast.Attribute) else id(n) for n in own if id(n) in allowed}
    for node in own:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in (model, optimizer) \
                and id(node) not in allowed:
            what = "read outside the tape or before the model's call, where it holds another pass's terms" \
                if node.attr == "losses" else "no counterpart in a pure step yet"
            return f"`{node.value.id}.{node.attr}` inside the step: {what}"
        if isinstance(node, ast.Name) and node.id in (model, optimizer) and isinstance(node.ctx, ast.Load):
            if id(node) not in allowed_names:
                return f"`{node.id}` is used other than by calling the model inside the tape"
    return None


def _hoistable(tape: ast.With, call: ast.Call, fn, model: str) -> str | None:
    """Why the one model call cannot become ``state.apply_model(...)`` in its statement, if it cannot.

    Its statement must be a direct simple statement of the tape; a call nested in an
    expression is hoisted into ``<model>_outputs`` just before it, which is exact unless
    the call sits where Python may not evaluate it (lambda, comprehension, ``x if c else y``,
    ``and``/``or``).
    """
    stmt = next((s for s in tape.body if any(n is call for n in ast_walk(s))), None)
    if stmt is None or isinstance(stmt, (ast.For, ast.While, ast.If, ast.With, ast.Try)):
        return "the model is called outside the tape or inside a block within it: not translated yet"
    for node in ast_walk(stmt):
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.IfExp, ast.BoolOp)) \
                and any(n is call for n in ast_walk(node)):
            return "the model is called inside a lambda, comprehension or conditional expression"
    direct = isinstance(stmt, ast.Assign) and stmt.value is call and len(stmt.targets) == 1
    if direct and not isinstance(stmt.targets[0], ast.Name):
        return "the model's output is unpacked; assign it to one name inside the tape"
    if not direct and f"{model}_outputs" in {n.id for n in ast_walk(fn) if isinstance(n, ast.Name)}:
        return f"the step already uses the name `{model}_outputs`, which its translation needs"
    return None


# -- threaders and readers --------------------------------------------------------


def _threader(fn: ast.FunctionDef, sigs: dict[str, TrainSig]) -> tuple[TrainSig | None, str | None]:
    params = positional(fn)
    own = {id(n) for n in own_nodes(fn)}
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in sigs and sigs[n.func.id].updates
           and id(n) not in own for n in ast_walk(fn)):
        return None, "a training call inside a lambda or nested function cannot pass the state on; write a loop"
    if any(sig.updates and sig.pairs for _, sig in passing_calls(fn, sigs)):
        return multi_state_steps.multi_threader(fn, sigs)
    pairs = set()
    for call, sig in passing_calls(fn, sigs):
        if not sig.updates:
            continue
        if sig.builds:
            return None, f"`{sig_name(call)}` makes its own optimizer: a function handing it the model is not threaded yet"
        m_arg, o_arg = arg_at(call, sig, sig.model), arg_at(call, sig, sig.optimizer)
        if not (isinstance(m_arg, ast.Name) and isinstance(o_arg, ast.Name)):
            return None, f"`{sig_name(call)}` gets a model or optimizer that is not a plain name"
        pairs.add((m_arg.id, o_arg.id))
    if not pairs:
        pairs = train_checkpoints.restoring_pair(fn, sigs, params or ())
    if not pairs:
        return None, None
    if params is None or len(pairs) != 1:
        return None, "several models/optimizers, or *args/**kwargs, around the training calls"
    model, optimizer = next(iter(pairs))
    builds = model in params and optimizer not in params
    if builds:
        reason = _builder_refusal(fn, model, optimizer)
        if reason:
            return None, reason
    elif model not in params or optimizer not in params:
        return None, "the model is created here, not passed in: building its train state is not translated yet"
    nested = nested_use(fn, (model, optimizer))
    if nested:
        return None, f"`{nested}` is used inside a nested function or lambda"
    allowed: set[int] = set()
    for call, sig in passing_calls(fn, sigs):
        for param in (sig.model, sig.optimizer):
            if param is not None:
                arg = arg_at(call, sig, param)
                if arg is not None:
                    allowed.add(id(arg))
    parents = parent_map(fn)
    if builds:
        allowed |= _before_build(fn, model, optimizer)
        built_at = fn.body[_build_index(fn, model, optimizer)].end_lineno
        if any(call.lineno <= built_at for call, _ in passing_calls(fn, sigs)):
            return None, f"a training call before `{optimizer}.build(...)`, where the train state is made"
    for node in own_nodes(fn):
        if is_build(node, model, optimizer):
            allowed.update({id(node.value.func.value), id(node.value.args[0].value)})
        if _is_optimizer_read(node, optimizer, parents):
            allowed.add(id(node.value))
    saved, _, reason = train_checkpoints.uses(fn, sigs, model, optimizer, list(own_nodes(fn)))
    if reason:
        return None, reason
    allowed |= saved
    for node in own_nodes(fn):
        if isinstance(node, ast.Name) and node.id in (model, optimizer) and id(node) not in allowed:
            return None, f"`{node.id}` is used for more than the training calls: not translated yet"
    for call, sig in passing_calls(fn, sigs):
        if sig.updates:
            reason = hoist_refusal(fn, call)
            if reason:
                return None, reason
    names = {n.id for n in ast_walk(fn) if isinstance(n, ast.Name)}
    if "state" in names or "state" in params or any(f"{sig_name(c)}_result" in names for c, _ in passing_calls(fn, sigs)):
        return None, "the function already uses the name `state`, which its translation needs"
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own_nodes(fn)):
        return None, "a generator"
    return TrainSig("threader", params, model, optimizer, checkpoints=train_checkpoints.roles(fn, sigs),
                    builds=builds, advancing=multi_state_steps.advancing_loops(fn, sigs)), None


def _build_index(fn: ast.FunctionDef, model: str, optimizer: str) -> int | None:
    """Where in ``fn.body`` the optimizer is built for the model (a top-level statement), if it is."""
    return next((i for i, stmt in enumerate(fn.body) if is_build(stmt, model, optimizer)), None)


def _builder_refusal(fn: ast.FunctionDef, model: str, optimizer: str) -> str | None:
    """Why a function that makes its optimizer cannot build the train state where Keras builds
    the optimizer, if it cannot. It needs one top-level ``optimizer = <call>``, then one top-level
    ``optimizer.build(model.trainable_variables)`` (the variables and frozen flags of that moment
    make the state), and every training call after it."""
    binds = [n for n in ast_walk(fn) if isinstance(n, ast.Name) and n.id == optimizer and not isinstance(n.ctx, ast.Load)]
    made = [i for i, stmt in enumerate(fn.body) if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == optimizer and isinstance(stmt.value, ast.Call)]
    if len(binds) != 1 or len(made) != 1:
        return (f"`{optimizer}` is made here but not by one top-level `{optimizer} = ...` statement: its train state "
                "cannot be built where Keras builds the optimizer")
    build = _build_index(fn, model, optimizer)
    if build is None or build < made[0]:
        return (f"`{optimizer}` is made here without a top-level `{optimizer}.build({model}.trainable_variables)` after "
                "it: where Keras builds it (its first update, after any freezing) is not a place the state can be made")
    if any(isinstance(n, ast.Name) and n.id == optimizer and isinstance(n.ctx, ast.Load)
           for stmt in fn.body[:build] for n in ast_walk(stmt)):
        return f"`{optimizer}` is used before `{optimizer}.build(...)`, where the train state does not hold it yet"
    return None


def _before_build(fn: ast.FunctionDef, model: str, optimizer: str) -> set[int]:
    """The uses of ``model`` and ``optimizer`` a builder may make before the state exists: any use
    of the model (it is the module object then: ``state.module``) and the optimizer's making
    (``_builder_refusal`` refused any other use of the optimizer there)."""
    build = _build_index(fn, model, optimizer)
    return {id(n) for stmt in fn.body[:build] for n in ast_walk(stmt)
            if isinstance(n, ast.Name) and n.id in (model, optimizer)}


#: optimizer attributes a threader may read: Keras' values at the threaded state's step
#: (``state.step``, ``state.tx.learning_rate_at(state.step)``)
OPTIMIZER_READS = frozenset({"learning_rate", "iterations"})


def _is_optimizer_read(node, optimizer: str, parents: dict[int, ast.AST]) -> bool:
    """``O.learning_rate`` / ``O.iterations`` read as a value (not assigned, not ``O.iterations.assign(...)``)."""
    if not (isinstance(node, ast.Attribute) and node.attr in OPTIMIZER_READS and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Name) and node.value.id == optimizer):
        return False
    parent = parents.get(id(node))
    return not (isinstance(parent, ast.Attribute) and parent.value is node)


def _reader(fn: ast.FunctionDef, sigs: dict[str, TrainSig]) -> TrainSig | None:
    params = positional(fn)
    if params is None:
        return None
    own = list(own_nodes(fn))
    passed = {}
    for call, sig in passing_calls(fn, sigs):
        arg = arg_at(call, sig, sig.model)
        if arg is not None and sig.kind == "reader":
            passed[id(arg)] = call
    if not passed and not any(n.__class__ is ast.keyword and n.arg == "training" for n in own):
        return None  # no evidence can be found below: no reader passed a model, no ``training=``
    names = {n.id for n in ast_walk(fn) if isinstance(n, ast.Name)}
    if "state" in names or "state" in params:
        return None
    own_ids = {id(n) for n in own}
    nested = {n.id for n in ast_walk(fn) if isinstance(n, ast.Name) and id(n) not in own_ids}  # nested_use, for every param at once
    calls = {id(n.func): n for n in own if isinstance(n, ast.Call)}
    for param in params:
        uses = [n for n in own if isinstance(n, ast.Name) and n.id == param]
        if not uses or param in nested:
            continue
        ok, evidence = True, False
        for use in uses:
            if id(use) in passed:
                evidence = True
            elif id(use) in calls:
                call = calls[id(use)]
                training = [k for k in call.keywords if k.arg == "training"]
                if training and not (isinstance(training[0].value, ast.Constant) and training[0].value.value in (True, False)):
                    ok = False  # a training flag known only at run time
                evidence = evidence or bool(training)
            else:
                ok = False
        if ok and evidence:
            return TrainSig("reader", params, param)
    return None


def _reader_or_threader(fn: ast.FunctionDef, sigs: dict[str, TrainSig]) -> tuple[TrainSig | None, str | None]:
    reader = _reader(fn, sigs)
    return (reader, None) if reader is not None else _threader(fn, sigs)


def _settle(functions: list[ast.FunctionDef], sigs: dict, refusals: dict, classify) -> None:
    """Classify the functions not decided yet until nothing changes: a function's kind can
    depend on the kinds of the functions it calls, in any order of definition."""
    decide = _Remembered(classify, sigs)
    changed = True
    while changed:
        changed = False
        for fn in functions:
            if fn.name in sigs or fn.name in refusals:
                continue
            sig, _ = decide(fn)
            if sig is not None:
                sigs[fn.name] = sig
                changed = True
    for fn in functions:  # a refusal stands only once no callee can still change
        if fn.name not in sigs and fn.name not in refusals:
            _, reason = decide(fn)
            if reason:
                refusals[fn.name] = reason


class _Remembered:
    """``classify(fn, sigs)``, asked again only when the signature of a function ``fn`` calls by
    name has changed since: the classifiers read ``sigs`` only at such calls (``f(...)`` with
    ``f`` in ``sigs``). Each pass of ``_settle`` otherwise re-read every undecided function."""

    def __init__(self, classify, sigs: dict):
        self.classify, self.sigs = classify, sigs
        self.answers: dict[int, tuple[tuple, tuple]] = {}  # id(fn) -> (its callees' sigs then, the answer)
        self.callees: dict[int, tuple[str, ...]] = {}

    def __call__(self, fn: ast.FunctionDef) -> tuple:
        names = self.callees.get(id(fn))
        if names is None:
            names = self.callees[id(fn)] = tuple(sorted({
                n.func.id for n in ast_walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}))
        seen = tuple(self.sigs.get(name) for name in names)
        last = self.answers.get(id(fn))
        if last is not None and all(a is b for a, b in zip(last[0], seen)):
            return last[1]
        answer = self.classify(fn, self.sigs)
        self.answers[id(fn)] = (seen, answer)
        return answer


def analyse(functions: list[ast.FunctionDef]) -> tuple[dict[str, TrainSig], dict[str, str]]:
    """Signatures of the package's training functions, and refusals by function name."""
    sigs: dict[str, TrainSig] = {}
    refusals: dict[str, str] = {}

    several: list[ast.FunctionDef] = []
    for fn in functions:
        sig, reason = step_refusal(fn)
        if sig is not None:
            sigs[fn.name] = sig
        elif reason == SEVERAL_OPTIMIZERS:
            several.append(fn)  # a multi-state step once the readers it calls are known
        elif reason:
            refusals[fn.name] = reason
    _settle(functions, sigs, refusals, train_checkpoints.checkpointer)

    def classify(fn, known):
        if fn in several:
            return multi_state_steps.multi_step(fn, known)
        return _reader_or_threader(fn, known)

    _settle(functions, sigs, refusals, classify)
    for fn in several:
        if fn.name not in sigs and fn.name not in refusals:
            refusals[fn.name] = SEVERAL_OPTIMIZERS
    return sigs, refusals
