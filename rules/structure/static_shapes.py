"""Dimensions unpacked from ``tf.shape(x)`` stay Python ints, so ``jit`` can use them.

TF code reads a tensor's dimensions as int32 tensors: ``b, t, _ = tf.unstack(tf.shape(x))``,
or ``_, h, w, _ = tf.split(tf.shape(x), 4)`` followed by ``h = tf.squeeze(h)``, and
``tf.math.minimum(self.block, h)``. Translated call by call, each becomes a ``jnp`` array,
which under ``jax.jit`` is a tracer: ``jnp.arange(h)``, ``jnp.reshape(y, [b, h, -1])`` or
``int(h // 2)`` then raise, where in JAX the shape is known while tracing. These statements
are rewritten to read ``jnp.shape(x)``, a tuple of Python ints, with the same values:

* ``a, b = tf.unstack(tf.shape(x)[...])`` (and ``tf.unstack(tf.shape(x))[...]``): unpacked
  from ``jnp.shape(x)`` directly;
* ``a, b = tf.split(tf.shape(x), 2)``: TF's pieces are 1-element vectors, so this is done
  only where every piece read later is first ``p = tf.squeeze(p)``, in the same block;
  those squeezes go (the int is already a scalar);
* ``m = tf.math.minimum(a, b)`` (or ``maximum``) where one operand is such a dimension and
  the other one too, an int literal or an attribute of ``self``: Python's ``min``/``max``,
  the same scalar. Were the attribute an array, ``min`` still gives the same value outside
  ``jit`` and raises inside it: never a different number.

A name stops being a dimension where the function binds it to anything else.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.rule import Rule
from tern.engine.walk import findall, walk
from tern_rules.structure.input_gradient_tape import stores

SHAPE = frozenset({"tensorflow.shape"})
UNSTACK = frozenset({"tensorflow.unstack"})
SPLIT = frozenset({"tensorflow.split"})
SQUEEZE = frozenset({"tensorflow.squeeze"})
MIN_MAX = {"tensorflow.math.minimum": "min", "tensorflow.minimum": "min",
           "tensorflow.math.maximum": "max", "tensorflow.maximum": "max"}

UNPACK, SPLIT_PIECES, SQUEEZED, MIN_OR_MAX = "unpack", "split", "squeezed", "min_max"


class StaticShapesRule(Rule):
    id = "structure:static-shapes"
    order = 59

    def visit_function(self, ctx, node: cst.FunctionDef) -> None:
        if not ctx.scopes.imports_source:
            return
        plan = ctx.rule_state.setdefault(self.id, {})
        plan.update(_plan(ctx, node))

    def leave_statement(self, ctx, original, updated):
        kind = ctx.rule_state.get(self.id, {}).get(id(original))
        if kind is None or len(updated.body) != 1 or not isinstance(updated.body[0], cst.Assign):
            return None
        assign = updated.body[0]
        if kind == SQUEEZED:
            return cst.RemovalSentinel.REMOVE
        if kind in (UNPACK, SPLIT_PIECES):
            shape = _translated_shape(assign.value)
            return None if shape is None else updated.with_changes(body=[assign.with_changes(value=shape)])
        call = assign.value
        if not isinstance(call, cst.Call) or len(call.args) != 2 or any(a.keyword or a.star for a in call.args):
            return None  # the template did not keep two plain operands: leave the array version
        builtin = MIN_MAX[ctx.resolve(original.body[0].value.func)]
        args = [call.args[0].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                call.args[1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
        return updated.with_changes(body=[assign.with_changes(value=cst.Call(cst.Name(builtin), args))])


def _plan(ctx, fn: cst.FunctionDef) -> dict[int, str]:
    """id(original statement) -> what to make of it, for one function's own statements, in
    source order (a name bound to anything else stops being a dimension from there on)."""
    plan: dict[int, str] = {}
    dims: set[str] = set()
    for block, i in _statements(fn.body):
        stmt = block[i]
        if not isinstance(stmt, cst.SimpleStatementLine):
            if dims:  # (what a statement binds is only worth finding while there are dimensions to forget)
                dims -= _header_bound(stmt)
            continue
        kind = _classify(ctx, stmt, dims)
        if kind == SPLIT_PIECES:
            squeezes = _squeezes(ctx, stmt, block[i + 1:])
            if squeezes is None:
                kind = None
            else:
                plan.update((id(s), SQUEEZED) for s in squeezes)
        if kind in (UNPACK, SPLIT_PIECES, MIN_OR_MAX):
            plan[id(stmt)] = kind
            dims |= _bound(stmt) - {"_"}
        elif dims and plan.get(id(stmt)) != SQUEEZED:
            dims -= _bound(stmt)
    return plan


def _classify(ctx, stmt: cst.SimpleStatementLine, dims: set[str]) -> str | None:
    if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign) or len(stmt.body[0].targets) != 1:
        return None
    target, value = stmt.body[0].targets[0].target, stmt.body[0].value
    if isinstance(target, (cst.Tuple, cst.List)) and _names(target) is not None:
        if _is_unstacked_shape(ctx, value):
            return UNPACK
        if _is_split_shape(ctx, value, len(target.elements)):
            return SPLIT_PIECES
    if isinstance(target, cst.Name) and isinstance(value, cst.Call) and ctx.resolve(value.func) in MIN_MAX:
        args = value.args
        if len(args) == 2 and not any(a.keyword or a.star for a in args) \
                and all(_scalar_int(a.value, dims) for a in args) and any(_dim(a.value, dims) for a in args):
            return MIN_OR_MAX
    return None


def _is_unstacked_shape(ctx, value: cst.BaseExpression) -> bool:
    """``tf.unstack(tf.shape(x))``, optionally sliced inside or outside the unstack."""
    if isinstance(value, cst.Subscript) and _slices(value):
        value = value.value
    if not isinstance(value, cst.Call) or ctx.resolve(value.func) not in UNSTACK or len(value.args) != 1 or value.args[0].keyword:
        return False
    inner = value.args[0].value
    if isinstance(inner, cst.Subscript) and _slices(inner):
        inner = inner.value
    return _is_shape_call(ctx, inner)


def _is_split_shape(ctx, value: cst.BaseExpression, pieces: int) -> bool:
    """``tf.split(tf.shape(x), n)`` into n names: one dimension per piece."""
    if not isinstance(value, cst.Call) or ctx.resolve(value.func) not in SPLIT or len(value.args) != 2:
        return False
    first, count = value.args
    if first.keyword or first.star or (count.keyword and count.keyword.value != "num_or_size_splits"):
        return False
    return _is_shape_call(ctx, first.value) and isinstance(count.value, cst.Integer) and count.value.evaluated_value == pieces


def _is_shape_call(ctx, node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Call) and ctx.resolve(node.func) in SHAPE and len(node.args) == 1 and not node.args[0].keyword


def _slices(node: cst.Subscript) -> bool:
    return all(isinstance(e.slice, cst.Slice) for e in node.slice)


def _squeezes(ctx, split: cst.SimpleStatementLine, after: list[cst.BaseStatement]) -> list[cst.SimpleStatementLine] | None:
    """The ``p = tf.squeeze(p)`` statements that first read each piece, or None if a piece is
    read any other way first (there TF's 1-element vector is what the code uses)."""
    pending = {n for n in _names(split.body[0].targets[0].target) if n != "_"}
    found = []
    for stmt in after:
        if not pending:
            break
        read = _reads(stmt) & pending
        if not read:
            if _bound(stmt) & pending:
                return None  # rebound unread: the piece was never squeezed
            continue
        name = _squeeze_of(ctx, stmt)
        if name is None or read != {name}:
            return None
        found.append(stmt)
        pending.discard(name)
    return found


def _squeeze_of(ctx, stmt: cst.BaseStatement) -> str | None:
    """``p = tf.squeeze(p)``: the name p, else None."""
    pattern = m.SimpleStatementLine(body=[m.Assign(
        targets=[m.AssignTarget(target=m.Name())],
        value=m.Call(args=[m.Arg(value=m.Name(), keyword=None)]))])
    if not m.matches(stmt, pattern):
        return None
    assign = stmt.body[0]
    name = assign.targets[0].target.value
    if ctx.resolve(assign.value.func) not in SQUEEZE or assign.value.args[0].value.value != name:
        return None
    return name


def _translated_shape(value: cst.BaseExpression) -> cst.BaseExpression | None:
    """The ``jnp.shape(x)`` (sliced as the original was) inside a translated unstack or split."""
    outer = value.slice if isinstance(value, cst.Subscript) else None
    call = value.value if isinstance(value, cst.Subscript) else value
    if not isinstance(call, cst.Call) or not call.args:
        return None
    shape = call.args[0].value
    if m.matches(shape, m.Call(func=m.Attribute(attr=m.Name("asarray")), args=[m.Arg()])):
        shape = shape.args[0].value  # the split template's jnp.asarray(...)
    head = shape.value if isinstance(shape, cst.Subscript) else shape
    if not m.matches(head, m.Call(func=m.Attribute(attr=m.Name("shape")))):
        return None
    return cst.Subscript(shape, outer) if outer is not None else shape


def _scalar_int(node: cst.BaseExpression, dims: set[str]) -> bool:
    return isinstance(node, cst.Integer) or _dim(node, dims) or m.matches(node, m.Attribute(value=m.Name("self")))


def _dim(node: cst.BaseExpression, dims: set[str]) -> bool:
    return isinstance(node, cst.Name) and node.value in dims


def _names(target: cst.BaseExpression) -> list[str] | None:
    names = []
    for element in target.elements:
        if not isinstance(element, cst.Element) or not isinstance(element.value, cst.Name):
            return None
        names.append(element.value.value)
    return names


def _statements(suite: cst.BaseSuite):
    """(block, index) of every statement of a function body, in source order, a compound
    statement before its body; nested functions and classes are not entered."""
    block = list(suite.body) if isinstance(suite, cst.IndentedBlock) else [cst.SimpleStatementLine(suite.body)]
    for i, stmt in enumerate(block):
        yield block, i
        if not isinstance(stmt, (cst.SimpleStatementLine, cst.FunctionDef, cst.ClassDef)):
            yield from _compound(stmt)


def _compound(stmt: cst.BaseCompoundStatement):
    yield from _statements(stmt.body)
    for part in (getattr(stmt, "orelse", None), *getattr(stmt, "handlers", ()), getattr(stmt, "finalbody", None)):
        if isinstance(part, cst.If):  # elif
            yield from _compound(part)
        elif part is not None:
            yield from _statements(part.body)


def _bound(stmt: cst.CSTNode) -> set[str]:
    """Names a statement (re)binds: assignment and loop targets, walrus and ``as`` names."""
    extra = findall(stmt, m.NamedExpr() | m.AsName())
    return stores(stmt) | {n.value for e in extra for n in findall(e.target if isinstance(e, cst.NamedExpr) else e.name, m.Name())}


def _header_bound(stmt: cst.BaseStatement) -> set[str]:
    """Names a compound statement's header binds: a ``for`` target, ``with ... as`` names,
    a nested function's or class's name."""
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return {stmt.name.value}
    if isinstance(stmt, cst.For):
        return {n.value for n in findall(stmt.target, m.Name())}
    if isinstance(stmt, cst.With):
        return {n.value for item in stmt.items if item.asname for n in findall(item.asname.name, m.Name())}
    return set()


def _reads(stmt: cst.CSTNode) -> set[str]:
    """Names a statement reads (an attribute's name and a keyword are no reads)."""
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Attribute(self, node):
            walk(node.value, self)
            return False

        def visit_Arg(self, node):
            walk(node.value, self)
            return False

        def visit_AssignTarget(self, node):
            if not isinstance(node.target, cst.Name):
                walk(node.target, self)  # x[i] = ..., x.a = ...: x is read
            return False

        def visit_Name(self, node):
            found.add(node.value)

    walk(stmt, V())
    return found


RULE = StaticShapesRule()
