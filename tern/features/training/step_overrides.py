"""Which Keras ``train_step`` / ``test_step`` overrides tern translates, and where they split.

Keras runs an overridden ``train_step(self, data)`` once per batch inside ``fit``, in one
graph: the forward pass under a tape, ``self.optimizer.apply_gradients``, then the metric
trackers' ``update_state`` and the logs. In JAX the first half is a pure function of a
train state and the batch (jitted by the trainer); the trackers are Python objects
(rules/support/KerasMean.py, ...) that must see concrete values, outside jit. So an
override is translated when it splits cleanly into

- a **pure part**: statements that use ``self`` only to run the model (``self(...)``, the
  class's own methods, sublayers, fields), plus for ``train_step`` one
  ``with tf.GradientTape() as tape:`` block, ``grads = tape.gradient(loss,
  self.trainable_weights)`` and ``self.optimizer.apply_gradients(zip(grads,
  self.trainable_weights))`` right after it;
- an **eager part**: every statement from the first that touches a tracker (an attribute
  the constructor sets to a ``keras.metrics`` object with a literal name, or
  ``self.metrics``) to the one final ``return``; it may read the pure part's names, never
  the model.

The class must list its trackers in a ``metrics`` property (Keras resets ``model.metrics``
at every epoch of ``fit`` and at the start of ``evaluate``; without the property Keras'
own list also holds the compiled loss and every tracked sublayer's metrics). Decided
package-wide, once, on Python's ``ast``; ``rules/structure/keras_step_override.py``
rewrites, ``tern/features/training/compiled_models.py`` lets ``fit``/``evaluate`` through.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from tern.engine.ast_walks import own_nodes, walk as ast_walk
from tern.engine.names import ast_tail
from tern.features.training.step_syntax import TRAINABLE, is_tape


TRANSLATED = ("train_step", "test_step")
#: names the translation introduces inside the method
INTRODUCED = frozenset({"state", "params", "model_state", "compute_loss", "forward"})
#: ``self.<attr>`` a pure part may not read, with the reason
KERAS_ATTRS = {
    "compiled_loss": "the compiled loss (Keras 2 API): not translated in an override yet",
    "compute_loss": "Keras' compiled-loss computation: not translated in an override yet",
    "compiled_metrics": "the compiled metrics (Keras 2 API): not translated in an override yet",
    "compute_metrics": "Keras' compiled-metrics update: not translated in an override yet",
    "losses": "Keras' `model.losses` inside an override: not translated yet",
    "loss": "the compiled loss: not translated in an override yet",
    "call": "`self.call` (the translation's `__call__`): call `self(...)`",
    "metrics": "the trackers are Python objects: only the part after the optimizer step may read them",
    "optimizer": "the optimizer lives in the train state: only `self.optimizer.apply_gradients(...)` is translated",
}


@dataclass(frozen=True)
class StepPlan:
    """How one override splits (see the module docstring)."""

    method: str
    data: str  # the batch parameter
    values: tuple[str, ...]  # names the pure part hands the eager part, sorted
    loss: str | None = None  # train_step: the differentiated name
    grads: str | None = None
    aux: tuple[str, ...] = ()  # train_step: names the tape computes and later code reads


@dataclass
class ClassSteps:
    """A Keras class's training overrides: the translatable ones and why the others are not."""

    trackers: tuple[str, ...] = ()
    plans: dict[str, StepPlan] = field(default_factory=dict)
    refusals: dict[str, str] = field(default_factory=dict)


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}


def _self_assigned(fn: ast.FunctionDef) -> dict[str, ast.expr | None]:
    out: dict[str, ast.expr | None] = {}
    for node in ast_walk(fn):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                out[target.attr] = node.value if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
    return out


def _is_metric(value: ast.expr | None) -> bool:
    """``keras.metrics.Mean(...)``, ``tf.keras.metrics.Mean(...)``, ``metrics.Mean(...)``."""
    if not isinstance(value, ast.Call):
        return False
    parts = []
    node = value.func
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return len(parts) >= 2 and parts[1] == "metrics"


def _tracker_reason(attr: str, value: ast.Call) -> str | None:
    names = [k.value for k in value.keywords if k.arg == "name"] or value.args[:1]
    if not names or not (isinstance(names[0], ast.Constant) and isinstance(names[0].value, str)):
        return (f"the tracker `self.{attr}` has no literal name: Keras names it from a process-wide counter when it "
                "is built, the translation builds it on first use; give it `name=\"...\"`")
    if any(not isinstance(a, ast.Constant) for a in [*value.args, *(k.value for k in value.keywords)]):
        return f"the tracker `self.{attr}` is built from values other than literals"
    return None


def _metrics_property(methods: dict[str, ast.FunctionDef], trackers: set[str]) -> str | None:
    prop = methods.get("metrics")
    if prop is None or not any(ast_tail(d) == "property" for d in prop.decorator_list):
        return ("the class has no `metrics` property: Keras' default `model.metrics` also holds the compiled loss and "
                "metrics and every tracked sublayer's, which fit resets and reports: list the trackers in a `metrics` "
                "property")
    body = [s for s in prop.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if not (len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, (ast.List, ast.Tuple))
            and all(isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self"
                    and e.attr in trackers for e in body[0].value.elts)):
        return "the `metrics` property is not a list of the trackers the constructor builds (`return [self.a, ...]`)"
    return None


def analyse_class(cls: ast.ClassDef) -> ClassSteps:
    """What tern can do with ``cls``'s ``train_step``/``test_step``/... overrides."""
    methods = _methods(cls)
    out = ClassSteps()
    if "predict_step" in methods:
        out.refusals["predict_step"] = "Keras' predict runs it instead of its default step: not translated yet"
    wanted = [m for m in TRANSLATED if m in methods]
    if not wanted:
        return out
    assigned = _self_assigned(methods["__init__"]) if "__init__" in methods else {}
    trackers = {a for a, v in assigned.items() if _is_metric(v)}
    reason = next((r for a in sorted(trackers) if (r := _tracker_reason(a, assigned[a]))), None)
    top = {t.attr for s in methods.get("__init__", ast.Module([], [])).body if isinstance(s, ast.Assign)
           and len(s.targets) == 1 for t in s.targets if isinstance(t, ast.Attribute)}
    reason = reason or next((f"the tracker `self.{a}` is built inside a block of `__init__` or unpacked"
                             for a in sorted(trackers - top)), None)
    reason = reason or _metrics_property(methods, trackers)
    model_attrs = (set(methods) - {"call", "metrics", *TRANSLATED}) | (set(assigned) - trackers)
    if "__init__" in methods:
        init = methods["__init__"].args
        model_attrs |= {a.arg for a in (*init.args, *init.kwonlyargs)} - {"self"}
    for name in wanted:
        plan, why = _plan(methods[name], trackers | {"metrics"}, model_attrs)
        if plan is not None and reason:
            plan, why = None, reason
        if plan is not None:
            out.plans[name] = plan
        else:
            out.refusals[name] = why
    if out.plans:
        out.trackers = tuple(sorted(trackers))
    return out


def _stores(nodes) -> set[str]:
    return {n.id for s in nodes for n in ast_walk(s) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}


def _loads(nodes) -> set[str]:
    return {n.id for s in nodes for n in ast_walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _self_attrs(stmt: ast.AST) -> list[ast.Attribute | ast.Call]:
    """Every use of ``self`` in ``stmt``: ``self.<attr>`` nodes, or the call ``self(...)``."""
    def is_self(node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and node.id == "self"

    return [n for n in ast_walk(stmt) if (isinstance(n, ast.Attribute) and is_self(n.value))
            or (isinstance(n, ast.Call) and is_self(n.func))]


def _bare_self(stmt: ast.AST) -> bool:
    """``self`` used other than as ``self.<attr>`` or ``self(...)`` (passed on, stored)."""
    wrapped = {id(n.value) for n in ast_walk(stmt) if isinstance(n, ast.Attribute)}
    wrapped |= {id(n.func) for n in ast_walk(stmt) if isinstance(n, ast.Call)}
    return any(isinstance(n, ast.Name) and n.id == "self" and id(n) not in wrapped for n in ast_walk(stmt))


def _touches_trackers(stmt: ast.AST, trackers: set[str]) -> bool:
    return any(isinstance(u, ast.Attribute) and u.attr in trackers for u in _self_attrs(stmt))


def _model_use_reason(stmts, model_attrs: set[str]) -> str | None:
    for stmt in stmts:
        if _bare_self(stmt):
            return f"`self` is passed on or stored (`{_short(stmt)}`): only its calls and attributes are translated"
        for use in _self_attrs(stmt):
            if isinstance(use, ast.Call):
                continue
            if use.attr in KERAS_ATTRS:
                return f"`self.{use.attr}`: {KERAS_ATTRS[use.attr]}"
            if use.attr in TRAINABLE:
                return f"`self.{use.attr}` outside `tape.gradient` / `apply_gradients`: no counterpart in a pure step"
            if use.attr not in model_attrs:
                return f"`self.{use.attr}` is not a method, sublayer or field of the class"
    return None


def _plan(fn: ast.FunctionDef, trackers: set[str], model_attrs: set[str]) -> tuple[StepPlan | None, str | None]:
    a = fn.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults or len(a.args) != 2:
        return None, "the override does not take exactly `(self, data)`"
    data = a.args[1].arg
    if fn.decorator_list:
        return None, "a decorated override (the trainer jits the translated step itself)"
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    own = list(own_nodes(fn))
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own):
        return None, "the override yields"
    returns = [n for n in own if isinstance(n, ast.Return)]
    if len(returns) != 1 or not body or body[-1] is not returns[0] or returns[0].value is None:
        return None, "the override must end with its one `return <logs>`"
    nested = [n for n in ast_walk(fn) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)) and n is not fn]
    if any(_self_attrs(n) or _bare_self(n) for n in nested):
        return None, "`self` is used inside a nested function or lambda"
    taken = sorted(INTRODUCED & ({n.id for n in ast_walk(fn) if isinstance(n, ast.Name)} | {data}))
    if taken:
        return None, f"the override already uses the name `{taken[0]}`, which its translation needs"
    if any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
           and not isinstance(n.ctx, ast.Load) for n in ast_walk(fn)):
        return None, "the override sets an attribute of `self` (a pure step cannot change the model object)"
    split = next(i for i, s in enumerate(body) if _touches_trackers(s, trackers) or s is body[-1])
    pure, eager = body[:split], body[split:]
    if fn.name == "train_step":
        got = _train_parts(pure, data, model_attrs)
        if isinstance(got, str):
            return None, got
        loss, grads, tape_stored, middle, stored = got
        aux = tuple(sorted(tape_stored & (_loads(middle) | _loads(eager)) - {loss}))
    else:
        reason = _model_use_reason(pure, model_attrs)
        if reason:
            return None, reason
        if any(is_tape(n) for s in pure for n in ast_walk(s)):
            return None, "a tf.GradientTape in `test_step`: not translated"
        loss, grads, aux, stored = None, None, (), _stores(pure)
    for stmt in eager:
        if _bare_self(stmt) or any(isinstance(u, ast.Call) or u.attr not in trackers for u in _self_attrs(stmt)):
            return None, (f"`{_short(stmt)}` comes after the trackers are first used and also runs the model or reads "
                          "other attributes: the trackers are updated outside jit, after the step")
    values = tuple(sorted(_loads(eager) & (stored | {data})))
    if fn.name == "test_step" and pure and not (set(values) - {data}):
        return None, "the statements before the trackers compute nothing the trackers or the logs read"
    return StepPlan(fn.name, data, values, loss, grads, aux), None


def _train_parts(pure: list[ast.stmt], data: str, model_attrs: set[str]):
    """``(loss, grads, names the tape binds, the statements after the optimizer step, names the pure part binds)`` of a train_step's pure part, or why not."""
    tapes = [i for i, s in enumerate(pure) if isinstance(s, ast.With) and any(is_tape(it.context_expr) for it in s.items)]
    if len(tapes) != 1 or sum(is_tape(n) for s in pure for n in ast_walk(s)) != 1:
        return "one top-level `with tf.GradientTape() as tape:` block is needed (nested or several tapes are not translated yet)"
    at = tapes[0]
    tape = pure[at]
    if len(tape.items) != 1 or not isinstance(tape.items[0].optional_vars, ast.Name) \
            or tape.items[0].context_expr.args or tape.items[0].context_expr.keywords:
        return "the tape must be `with tf.GradientTape() as tape:` (persistent or unwatched tapes are not translated yet)"
    name = tape.items[0].optional_vars.id
    before, after = pure[:at], pure[at + 1:]
    if len(after) < 2:
        return "`grads = tape.gradient(loss, self.trainable_weights)` and `self.optimizer.apply_gradients(...)` must follow the tape"
    grad_stmt, apply_stmt, middle = after[0], after[1], after[2:]
    call = grad_stmt.value if isinstance(grad_stmt, ast.Assign) else None
    if not (isinstance(call, ast.Call) and ast_tail(call.func) == "gradient" and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name) and call.func.value.id == name and len(grad_stmt.targets) == 1
            and isinstance(grad_stmt.targets[0], ast.Name) and len(call.args) == 2 and not call.keywords
            and isinstance(call.args[0], ast.Name) and _is_trainable(call.args[1])):
        return "right after the tape: `grads = tape.gradient(loss, self.trainable_weights)` (one loss, all the weights)"
    loss, grads = call.args[0].id, grad_stmt.targets[0].id
    apply = apply_stmt.value if isinstance(apply_stmt, ast.Expr) else None
    if not (isinstance(apply, ast.Call) and isinstance(apply.func, ast.Attribute) and apply.func.attr == "apply_gradients"
            and isinstance(apply.func.value, ast.Attribute) and apply.func.value.attr == "optimizer"
            and isinstance(apply.func.value.value, ast.Name) and apply.func.value.value.id == "self"
            and len(apply.args) == 1 and not apply.keywords and isinstance(apply.args[0], ast.Call)
            and ast_tail(apply.args[0].func) == "zip" and len(apply.args[0].args) == 2
            and isinstance(apply.args[0].args[0], ast.Name) and apply.args[0].args[0].id == grads
            and _is_trainable(apply.args[0].args[1])):
        return ("right after tape.gradient: `self.optimizer.apply_gradients(zip(grads, self.trainable_weights))` "
                "(one optimizer, the unchanged gradients)")
    uses = [n for s in pure for n in ast_walk(s) if isinstance(n, ast.Name) and n.id == name]
    if len(uses) != 2:  # the `as` target and the one tape.gradient
        return "the tape is used other than by one `tape.gradient` (watch, a second gradient): not translated yet"
    reason = _model_use_reason(tape.body, model_attrs)
    if reason:
        return reason
    if any(_self_attrs(s) or _bare_self(s) for s in [*before, *middle]):
        return "the model is used outside the tape (before it or after the optimizer step): not translated yet"
    stored = _stores(tape.body)
    if loss not in stored:
        return f"the loss `{loss}` is not computed inside the tape"
    clash = sorted(stored & (_stores(before) | {data}))
    if clash:
        return f"`{clash[0]}` is rebound inside the tape; rename it there first"
    return loss, grads, stored, middle, stored | _stores(before) | _stores(middle)


def _is_trainable(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr in TRAINABLE and isinstance(node.value, ast.Name)
            and node.value.id == "self")


def _short(node: ast.AST) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= 60 else text[:57] + "..."
