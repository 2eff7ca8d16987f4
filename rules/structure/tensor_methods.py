"""Methods and attributes only TF values have (``x.get_shape()``, ``v.assign_add(1)``, ``t.shape.rank``): rewritten, or left with a TODO.

The engine resolves names reached through imports (``tf.*``); members of values are not
names, and the receiver's type is unknown, so without this rule they would pass through
silently and fail only when the code runs. The table ``tensor_methods.toml`` beside this
file holds one record per member: the TF classes that have it, on which receivers a use is
taken as TF's (any, for a name only TF uses; a visible shape or dtype, for common names),
and either a rewrite that is right for every TF value with that member and harmless for a
JAX array (``x.get_shape()`` -> ``x.shape``, ``s.as_list()`` -> ``list(s)``,
``x.shape.rank`` -> ``len(x.shape)``), or the reason of the TODO left in its place
(``v.assign(...)``: JAX arrays are immutable). Only files that import TensorFlow or Keras
are read (``x.numpy()`` excepted: see its record); members this file defines, ``self``'s
own, tern's support objects and the weight updates ``keras_class.py`` rewrites are never
flagged. TODOs name the member as ``tf.<Class>.<name>``.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
import libcst.matchers as m

from tern.engine.rule import Rule
from tern.engine.support_module import names as support_names
from tern.engine.walk import findall
from tern.engine.transform import transform
from tern_rules.structure.input_gradient_tape import Put
from tern_rules.structure.keras_class import KerasClass
from tern.features.training import TrainingFacts

TABLE = Path(__file__).with_name("tensor_methods.toml")
RECEIVER = "__tern_receiver__"  # the template placeholder ``{receiver}``, parsed as a name
SHAPE_CALLS = frozenset({"tensorflow.TensorShape"})
DTYPE_CALLS = frozenset({"tensorflow.as_dtype", "tensorflow.dtypes.as_dtype"})
DTYPE_MEMBERS = frozenset({"dtype", "base_dtype", "real_dtype"})
WEIGHT_UPDATES = frozenset({"assign", "assign_add", "assign_sub"})  # keras_class.py's ``_WeightRewriter``
STATE = "tensor_methods"


@dataclass(frozen=True)
class Member:
    """One TF-only method or attribute (fields: the table's header)."""

    name: str
    kind: str
    on: tuple[str, ...]
    receiver: str = "any"
    call: str = "any"
    template: str | None = None
    template_receiver: str | None = None
    todo: str = ""
    files: str = "tf"
    note: str = ""
    origin: str = ""

    @property
    def construct(self) -> str:
        return f"tf.{self.on[0]}.{self.name}"


@functools.cache
def members() -> dict[str, Member]:
    data = tomllib.loads(TABLE.read_text(encoding="utf-8"))
    out: dict[str, Member] = {}
    for i, raw in enumerate(data["member"]):
        record = Member(**{**raw, "on": tuple(raw["on"])}, origin=f"structure/tensor_methods.toml#{i}")
        if record.name in out:
            raise ValueError(f"tensor member {record.name!r} is listed twice ({out[record.name].origin}, {record.origin})")
        out[record.name] = record
    return out


def _identifier(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None


def _named(node: cst.BaseExpression, word: str) -> bool:
    name = _identifier(node)
    return name is not None and (name == word or name.endswith("_" + word))


def _is_shape(ctx, node: cst.BaseExpression) -> bool:
    """``x.shape``, ``x.get_shape()``, ``tf.TensorShape(...)``, ``input_shape``, ``x.shape[1:]``."""
    if isinstance(node, cst.Subscript):
        return _is_shape(ctx, node.value)  # a slice is a shape; an index is not, but nothing TF's hangs off one
    if isinstance(node, cst.Call):
        return (m.matches(node.func, m.Attribute(attr=m.Name("get_shape"))) and not node.args) or \
            ctx.resolve(node.func) in SHAPE_CALLS
    return _named(node, "shape")


def _is_dtype(ctx, node: cst.BaseExpression) -> bool:
    """``x.dtype``, ``x.dtype.base_dtype``, ``tf.as_dtype(...)``, ``compute_dtype``."""
    if isinstance(node, cst.Call):
        return ctx.resolve(node.func) in DTYPE_CALLS
    return _named(node, "dtype") or (isinstance(node, cst.Attribute) and node.attr.value in DTYPE_MEMBERS)


RECEIVERS = {"any": lambda ctx, node: True, "shape": _is_shape, "dtype": _is_dtype}


def _root(node: cst.BaseExpression) -> cst.BaseExpression:
    """The leftmost expression of ``a.b(c)[0].d``: what the chain starts from."""
    while isinstance(node, (cst.Attribute, cst.Call, cst.Subscript)):
        node = node.value if isinstance(node, (cst.Attribute, cst.Subscript)) else node.func
    return node


def _self_key(node: cst.BaseExpression) -> str | None:
    """``self.x`` for a chain starting at ``self.x`` (``self.x.kernel``, ``self.x[0]``)."""
    while isinstance(node, (cst.Attribute, cst.Call, cst.Subscript)):
        if node.__class__ is cst.Attribute and node.value.__class__ is cst.Name and node.value.value == "self":
            return f"self.{node.attr.value}"
        node = node.value if isinstance(node, (cst.Attribute, cst.Subscript)) else node.func
    return None


def _state(ctx) -> dict:
    return ctx.rule_state.setdefault(STATE, {"defined": None, "support": {}, "weight_updates": set()})


def _defined(ctx) -> set[str]:
    """Members this file defines: every method (a ``def`` whose first parameter is ``self`` or
    ``cls``, from the engine's one ``ast`` pass over the file) and, added as classes are met,
    every ``self.<name> = ...``."""
    state = _state(ctx)
    if state["defined"] is None:
        facts = ctx.scopes._facts
        keys = facts.scopes if facts is not None else ()
        state["defined"] = {name for name, params in keys if params and params[0] in ("self", "cls")}
    return state["defined"]


def _support_bound(ctx, scope: str) -> dict[str, str]:
    """Names bound to tern's support objects, with the support definition each comes from
    (``layer = _tern_layer(model, "d")``): ``scope`` "local" (this function's names, or the
    module's outside functions), "module", or "self" (``self.x``, anywhere in the file)."""
    if scope == "local":
        scope = id(ctx.frame) if ctx.frame is not None else "module"
    return _state(ctx)["support"].setdefault(scope, {})


@functools.cache
def _support_members() -> dict[str, frozenset[str]]:
    """Per support definition, the members of the support classes it is or reaches through the
    definitions it uses (``_tern_layer`` reaches KerasLayer and KerasVariable: ``assign``)."""
    import ast

    from tern.engine.support_module import definitions

    defined = definitions()
    own: dict[str, set[str]] = {}
    for name, definition in defined.items():
        for node in ast.parse(definition.code).body:
            if isinstance(node, ast.ClassDef):
                own[name] = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
                own[name] |= {t.id for n in node.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
                own[name] |= {t.attr for n in ast.walk(node) if isinstance(n, ast.Assign) for t in n.targets
                              if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    out = {}
    for name in defined:
        seen, todo = set(), [name]
        while todo:
            current = todo.pop()
            if current not in seen and current in defined:
                seen.add(current)
                todo.extend(defined[current].uses)
        out[name] = frozenset(member for reached in seen for member in own.get(reached, ()))
    return out


#: what a checkpointer's checkpoint and manager are in its translation (rules/structure/train_checkpoints.py)
CHECKPOINT_ROLES = {"checkpoint": "KerasCheckpoint", "manager": "KerasCheckpointManager"}


def _support_root(ctx, receiver: cst.BaseExpression) -> str | None:
    """The support definition a receiver's chain starts at: a support name, a name bound to one,
    or a checkpoint (or manager) of a checkpointer tern translated."""
    root = _root(receiver)
    if isinstance(root, cst.Name):
        if root.value in support_names():
            return root.value
        bound = _support_bound(ctx, "local").get(root.value) or _support_bound(ctx, "module").get(root.value)
        if bound is not None:
            return bound
        frame = ctx.frames[0] if ctx.frames else None
        sig = ctx.package.fact(TrainingFacts).steps.get(frame.name) if frame is not None else None
        if sig is not None and dict(sig.checkpoints).get(root.value) in CHECKPOINT_ROLES:
            return CHECKPOINT_ROLES[dict(sig.checkpoints)[root.value]]
    key = _self_key(receiver)
    return _support_bound(ctx, "self").get(key) if key is not None else None


def _support_has(ctx, receiver: cst.BaseExpression, member: str) -> bool:
    """The receiver is one of tern's support objects, which has this member itself (a KerasVariable's
    ``assign``); a support function's plain arrays (``_tern_leaves(m)[0]``) have none."""
    root = _support_root(ctx, receiver)
    return root is not None and member in _support_members().get(root, ())


def _takes(record: Member, call: cst.Call) -> bool:
    """Whether the call is shaped as TF's member is called."""
    if record.call == "no-args":
        return not call.args
    if record.call == "positional":
        return bool(call.args) and call.args[0].keyword is None and not call.args[0].star
    return True


class TensorMethodsRule(Rule):
    id = "structure:tensor-methods"
    order = 60

    def visit_class(self, ctx, node):
        _defined(ctx).update(_stored(node))
        info = ctx.keras_class
        if isinstance(info, KerasClass) and not info.refusal:
            _state(ctx)["weight_updates"].update(_weight_updates(node, info))

    def visit_function(self, ctx, node):
        _state(ctx)["support"][id(ctx.frame)] = {}  # a new frame (an earlier one's id may be reused)

    def leave_statement(self, ctx, original, updated):
        """Remember names bound to support objects, for the statements that follow."""
        for small in updated.body:
            if not isinstance(small, cst.Assign):
                continue
            root = _support_root(ctx, small.value)
            for target in small.targets:
                key = _self_key(target.target) if isinstance(target.target, cst.Attribute) else None
                name = key or (target.target.value if isinstance(target.target, cst.Name) else None)
                if name is None:
                    continue
                bound = _support_bound(ctx, "self" if key else "local")
                if root is not None:
                    bound[name] = root
                else:
                    bound.pop(name, None)
        return None

    def leave_call(self, ctx, original, updated):
        if not isinstance(original.func, cst.Attribute) or not isinstance(updated.func, cst.Attribute):
            return None
        record = members().get(original.func.attr.value)
        if record is None or record.kind != "method" or not _takes(record, original):
            return None
        if id(original) in _state(ctx)["weight_updates"]:
            return None  # keras_class.py makes it a Flax variable update
        return self._apply(ctx, record, original.func, original.func.value, updated.func.value)

    def leave_attribute(self, ctx, original, updated):
        record = members().get(original.attr.value)
        if record is None or record.kind != "attribute":
            return None
        return self._apply(ctx, record, original, original.value, updated.value)

    def _apply(self, ctx, record: Member, node, receiver, new_receiver):
        if record.files != "any" and not ctx.scopes.imports_source:
            return None  # a file with no TF: the member is someone else's
        if ctx.resolve(node) is not None or m.matches(receiver, m.Name("self") | m.Name("cls")):
            return None  # a TF symbol (the engine's), or the class's own member
        if not RECEIVERS[record.receiver](ctx, receiver):
            return None
        rewrite_on = record.template_receiver or record.receiver
        shows_tf = rewrite_on != "any" and RECEIVERS[rewrite_on](ctx, receiver)
        if not shows_tf and record.name in _defined(ctx):
            return None  # the file's own member (``x.shape.rank`` stays TF's even where a class has a ``rank``)
        if record.template is not None and RECEIVERS[rewrite_on](ctx, receiver):
            # right for every TF value and a JAX array, so for support objects too (they stand for those)
            template = record.template.replace("{receiver}", RECEIVER)
            return transform(ctx.target_expr(template), Put(RECEIVER, new_receiver))
        if record.todo and not _support_has(ctx, new_receiver, record.name):
            ctx.todo(record.construct, record.todo)
        return None


def _stored(cls: cst.ClassDef) -> set[str]:
    """Every ``<name>`` of ``self.<name> = ...`` (``+=``, annotated, unpacked) in the class."""
    targets = [t.target for node in findall(cls, m.Assign()) for t in node.targets]
    targets += [node.target for node in findall(cls, m.AugAssign() | m.AnnAssign())]
    return {a.attr.value for target in targets
            for a in findall(target, m.Attribute(value=m.Name("self"), attr=m.Name()))}


def _weight_updates(cls: cst.ClassDef, info: KerasClass) -> set[int]:
    """The calls ``keras_class.py`` rewrites into Flax variable updates: a statement
    ``self.<w>.assign(value)`` (``assign_add``, ``assign_sub``) on a non-trainable weight in ``call``."""
    out = set()
    call = next((s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "call"), None)
    if call is None:
        return out
    pattern = m.SimpleStatementLine(body=[m.Expr(value=m.Call(func=m.Attribute(
        value=m.Attribute(value=m.Name("self"), attr=m.Name()), attr=m.Name())))])
    for stmt in findall(call, pattern):
        node = stmt.body[0].value
        attr = node.func.value.attr.value
        if node.func.attr.value in WEIGHT_UPDATES and info.weights.get(attr) == "batch_stats" and len(node.args) == 1:
            out.add(id(node))
    return out


RULE = TensorMethodsRule()
