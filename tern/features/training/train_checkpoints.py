"""Which package functions checkpoint a model and its optimizer with ``tf.train.Checkpoint``.

Part of the training analysis (``tern/features/training/train_steps.py``), on Python's ``ast``. The translated
checkpoint (rules/support/KerasCheckpoint.py) saves and restores the train state that
threaders pass along, so the functions around it take part in the threading:

- a **checkpointer** puts two of its parameters, the model and the optimizer, in a
  ``tf.train.Checkpoint`` (with integer ``tf.Variable`` counters beside them) or passes
  them to another checkpointer, and uses them for nothing else: it takes the state in the
  model's place, drops the optimizer, and returns what it returned (``returns`` says which
  of its returned values are checkpoints and managers);
- a threader may do the same, and ``c.restore(path)`` on such a checkpoint updates the
  state (``state = c.restore(state, path)``); ``m.save(...)`` on its manager saves it.

Whatever else touches the checkpoint or its manager is refused with a reason (``CHECKPOINT_USES``).
"""

from __future__ import annotations

import ast

from tern.engine.ast_walks import own_nodes, walk as ast_walk
from tern.features.training.step_syntax import INTRODUCED, is_build, nested_use, positional, TrainSig

#: attributes of a translated checkpoint a function may use besides its counters
CHECKPOINT_USES = frozenset({"restore", "save_counter"})
#: attributes of a translated manager a function may use
MANAGER_USES = frozenset({"save", "latest_checkpoint", "checkpoints", "directory", "checkpoint", "sync"})
#: ``tf.train.CheckpointManager`` parameters the translation keeps
MANAGER_PARAMS = ("checkpoint", "directory", "max_to_keep", "keep_checkpoint_every_n_hours", "checkpoint_name",
                  "step_counter", "checkpoint_interval", "init_fn")
MANAGER_UNSUPPORTED = {
    "keep_checkpoint_every_n_hours": "keeping a checkpoint every n hours is not translated (orbax: keep_time_interval)",
    "step_counter": "save intervals (step_counter/checkpoint_interval) are not translated",
    "checkpoint_interval": "save intervals (step_counter/checkpoint_interval) are not translated",
    "init_fn": "restore_or_initialize's init_fn is not translated",
}
#: status methods chained on ``c.restore(path)`` and how the translation keeps them
RESTORE_CHAINS = {"assert_existing_objects_matched": True}
INT_DTYPES = {"int64": "numpy.int64", "int32": "numpy.int32"}
REFUSED = ("tf.train.Checkpoint of other objects than the model, its optimizer and integer tf.Variable counters: "
           "not translated yet")


def dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return node.id if isinstance(node, ast.Name) else ""


def _is_api(node, name: str) -> bool:
    """A call of ``tf.train.<name>`` (any spelling ending in ``train.<name>``, or the bare name)."""
    if not isinstance(node, ast.Call):
        return False
    path = dotted(node.func)
    return path == name or path.endswith(f"train.{name}")


def counter_dtype(call: ast.expr) -> str | None:
    """``numpy.int64``/``numpy.int32`` for ``tf.Variable(<int literal>[, dtype=tf.int64|tf.int32][, trainable=False]
    [, name="..."])``, else None."""
    if not (isinstance(call, ast.Call) and dotted(call.func).split(".")[-1] == "Variable" and len(call.args) == 1):
        return None
    value = call.args[0]
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        value = value.operand
    if not (isinstance(value, ast.Constant) and type(value.value) is int):
        return None
    dtype = "int32"  # tf.Variable(0) is int32
    for kw in call.keywords:
        if kw.arg == "dtype":
            dtype = dotted(kw.value).split(".")[-1] if not isinstance(kw.value, ast.Constant) else str(kw.value.value)
            if dtype not in INT_DTYPES:
                return None
        elif kw.arg == "trainable":
            if not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                return None
        elif kw.arg != "name":
            return None
    return INT_DTYPES[dtype]


def creation_reason(call: ast.Call, model: str, optimizer: str) -> str | None:
    """Why ``tf.train.Checkpoint(...)`` cannot become a KerasCheckpoint of ``model``'s train state, if it cannot."""
    if call.args or any(kw.arg is None for kw in call.keywords):
        return "tf.train.Checkpoint(root, ...) or **kwargs: only keyword arguments are translated"
    names = [kw.value.id for kw in call.keywords if isinstance(kw.value, ast.Name)]
    if sorted(n for n in names if n in (model, optimizer)) != sorted((model, optimizer)):
        return "tf.train.Checkpoint without both the model and its optimizer (e.g. weights only): not translated yet"
    for kw in call.keywords:
        if isinstance(kw.value, ast.Name) and kw.value.id in (model, optimizer):
            continue
        if kw.arg == "save_counter" or counter_dtype(kw.value) is None:
            return REFUSED
    return None


def _roles(fn: ast.FunctionDef, sigs) -> dict[str, str]:
    """Local names bound to a checkpoint or manager: created here or returned by a checkpointer."""
    roles: dict[str, str] = {}
    for node in ast_walk(fn):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Name) and _is_api(value, "Checkpoint"):
            roles[target.id] = "checkpoint"
        elif isinstance(target, ast.Name) and _is_api(value, "CheckpointManager") and value.args \
                and isinstance(value.args[0], ast.Name) and roles.get(value.args[0].id) == "checkpoint":
            roles[target.id] = "manager"
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in sigs:
            returns = sigs[value.func.id].returns
            if isinstance(target, ast.Name) and len(returns) == 1 and returns[0]:
                roles[target.id] = returns[0]
            elif isinstance(target, ast.Tuple) and len(target.elts) == len(returns) > 1:
                for element, role in zip(target.elts, returns):
                    if isinstance(element, ast.Name) and role:
                        roles[element.id] = role
    return roles


def restore_of(stmt: ast.stmt, roles: dict[str, str]) -> str | None:
    """The checkpoint name of a ``c.restore(path)`` statement (bare or with a kept status check)."""
    if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
        return None
    call = stmt.value
    if isinstance(call.func, ast.Attribute) and call.func.attr in RESTORE_CHAINS and not call.args \
            and not call.keywords and isinstance(call.func.value, ast.Call):
        call = call.func.value
    if (isinstance(call.func, ast.Attribute) and call.func.attr == "restore" and isinstance(call.func.value, ast.Name)
            and roles.get(call.func.value.id) == "checkpoint" and len(call.args) == 1 and not call.keywords):
        return call.func.value.id
    return None


def uses(fn: ast.FunctionDef, sigs, model: str | None, optimizer: str | None, own) -> tuple[set[int], int, str | None]:
    """``(ids of allowed model/optimizer names, number of restores, refusal)`` for the checkpoints in ``fn``."""
    roles = _roles(fn, sigs)
    allowed: set[int] = set()
    restores = 0
    restore_calls: set[int] = set()
    for stmt in own:
        name = restore_of(stmt, roles) if isinstance(stmt, ast.stmt) else None
        if name is not None:
            restores += 1
            call = stmt.value if dotted(stmt.value.func).endswith(".restore") else stmt.value.func.value
            restore_calls.add(id(call.func))
    for node in own:
        if _is_api(node, "Checkpoint"):
            if model is None or optimizer is None:
                return allowed, restores, None
            reason = creation_reason(node, model, optimizer)
            if reason:
                return allowed, restores, reason
            allowed.update(id(kw.value) for kw in node.keywords if isinstance(kw.value, ast.Name))
        if _is_api(node, "CheckpointManager"):
            first = node.args[0] if node.args else None
            if not (isinstance(first, ast.Name) and roles.get(first.id) == "checkpoint"):
                return allowed, restores, "tf.train.CheckpointManager of a checkpoint not made here: not translated yet"
            given = {kw.arg for kw in node.keywords} | set(MANAGER_PARAMS[:len(node.args)])
            bad = sorted(given & set(MANAGER_UNSUPPORTED))
            if bad:
                return allowed, restores, MANAGER_UNSUPPORTED[bad[0]]
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in roles:
            role, attr = roles[node.value.id], node.attr
            if role == "checkpoint" and attr == "restore" and id(node) not in restore_calls:
                return allowed, restores, ("checkpoint.restore(...) used other than as a statement "
                                           "`checkpoint.restore(path)` (optionally .assert_existing_objects_matched()): "
                                           "its status (expect_partial, assert_consumed, ...) is not translated")
            if role == "checkpoint" and attr in ("save", "write", "read", "model", "optimizer"):
                return allowed, restores, (f"checkpoint.{attr}: only CheckpointManager.save and checkpoint.restore "
                                           "of a manager's checkpoint are translated")
            if role == "manager" and attr not in MANAGER_USES:
                return allowed, restores, f"CheckpointManager.{attr} is not translated yet"
            if role == "manager" and attr == "save":
                call = next((c for c in own if isinstance(c, ast.Call) and c.func is node), None)
                if call is None or len(call.args) > 1 or any(k.arg != "checkpoint_number" for k in call.keywords):
                    return allowed, restores, "CheckpointManager.save other than save() or save(checkpoint_number=...)"
    return allowed, restores, None


def returns(fn: ast.FunctionDef, sigs, own) -> tuple[str | None, ...]:
    """Roles of what ``fn`` returns (``("checkpoint", "manager")`` for ``return c, m``), () if none or mixed."""
    roles = _roles(fn, sigs)
    shapes = set()
    for node in own:
        if isinstance(node, ast.Return) and node.value is not None:
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            shapes.add(tuple(roles.get(v.id) if isinstance(v, ast.Name) else None for v in values))
    return shapes.pop() if len(shapes) == 1 else ()


def checkpoint_pair(fn: ast.FunctionDef, sigs, params) -> tuple[str, str] | None:
    """(model, optimizer) among ``params`` as a Checkpoint here or a checkpointer call names them."""
    for node in ast_walk(fn):
        if _is_api(node, "Checkpoint"):
            values = {kw.arg: kw.value.id for kw in node.keywords if isinstance(kw.value, ast.Name) and kw.value.id in params}
            optimizer = values.get("optimizer")
            if optimizer is None:
                builds = [n for n in ast_walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                          and n.func.attr == "build" and isinstance(n.func.value, ast.Name)
                          and n.func.value.id in values.values()]
                optimizer = builds[0].func.value.id if len(builds) == 1 else None
            others = sorted(set(values.values()) - {optimizer})
            if optimizer is not None and len(others) == 1:
                return others[0], optimizer
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and sigs.get(node.func.id) is not None \
                and sigs[node.func.id].kind == "checkpointer":
            sig = sigs[node.func.id]
            args = {}
            for i, a in enumerate(node.args):
                if i < len(sig.params):
                    args[sig.params[i]] = a
            args.update({kw.arg: kw.value for kw in node.keywords})
            model, optimizer = args.get(sig.model), args.get(sig.optimizer)
            if isinstance(model, ast.Name) and isinstance(optimizer, ast.Name) and model.id in params \
                    and optimizer.id in params:
                return model.id, optimizer.id
    return None


def roles(fn: ast.FunctionDef, sigs) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(_roles(fn, sigs).items()))


def restoring_pair(fn: ast.FunctionDef, sigs, params) -> set[tuple[str, str]]:
    """``{(model, optimizer)}`` of a function that restores a checkpoint of them (it updates the state)."""
    pair = checkpoint_pair(fn, sigs, params)
    found = _roles(fn, sigs)
    if pair is None or not any(restore_of(s, found) for s in ast_walk(fn) if isinstance(s, ast.stmt)):
        return set()
    return {pair}


def checkpointer(fn: ast.FunctionDef, sigs):
    params = positional(fn)
    pair = checkpoint_pair(fn, sigs, params) if params else None
    if pair is None:
        return None, None
    model, optimizer = pair
    own = list(own_nodes(fn))
    if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in sigs and sigs[n.func.id].updates
           for n in own):
        return None, None  # passes the state to a step: a threader
    allowed, restores, reason = uses(fn, sigs, model, optimizer, own)
    if restores:
        return None, None  # updates the state: a threader
    if reason:
        return None, reason
    nested = nested_use(fn, pair)
    if nested:
        return None, f"`{nested}` is used inside a nested function or lambda"
    for node in own:
        if is_build(node, model, optimizer):
            allowed.update({id(node.value.func.value), id(node.value.args[0].value)})
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in sigs \
                and sigs[node.func.id].kind == "checkpointer":
            allowed.update(id(a) for a in (*node.args, *(k.value for k in node.keywords))
                           if isinstance(a, ast.Name) and a.id in pair)
    for node in own:
        if isinstance(node, ast.Name) and node.id in pair and id(node) not in allowed:
            return None, f"`{node.id}` is used for more than checkpointing: not translated yet"
    if ({n.id for n in ast_walk(fn) if isinstance(n, ast.Name)} | set(params)) & INTRODUCED:
        return None, "the function already uses a name its translation needs (`state`)"
    return TrainSig("checkpointer", params, model, optimizer, returns=returns(fn, sigs, own),
                    checkpoints=roles(fn, sigs)), None
