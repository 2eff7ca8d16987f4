"""``x.shape[:-1] + (256)``: a TensorShape concatenated with an int or a list, written as a tuple.

TF's ``TensorShape.__add__`` (and ``__radd__``) concatenates with anything that converts to a
shape: ``shape + 256`` is ``shape + [256]``, and ``[None] + shape`` works too. A JAX array's
shape is a tuple, which concatenates with tuples only: left as written, the translation
raises ``TypeError`` where the original worked. Rewritten only where the original cannot
have meant anything else: a literal int or list beside a visible TF shape (``x.shape``,
``x.shape[1:]``, ``x.get_shape()``, not ``self.shape`` nor a name such as ``input_shape``,
which may hold a plain list). A tuple literal already concatenates the same on both sides.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.dispatch import CachedHooks
from tern.engine.rule import Rule
from tern.engine.walk import findall
from tern.engine.transform import transform

SHAPE = m.Attribute(attr=m.Name("shape")) | m.Call(func=m.Attribute(attr=m.Name("get_shape")), args=[])


def _visible_shape(node: cst.BaseExpression) -> bool:
    """``x.shape``, ``x.get_shape()`` or a slice of either, off anything but ``self``/``cls``."""
    if isinstance(node, cst.Subscript):
        if not all(isinstance(e.slice, cst.Slice) for e in node.slice):
            return False  # an index is a dimension, not a shape
        node = node.value
    if not m.matches(node, SHAPE):
        return False
    receiver = node.value if isinstance(node, cst.Attribute) else node.func.value
    return not m.matches(receiver, m.Name("self") | m.Name("cls"))


def _as_tuple(node: cst.BaseExpression) -> cst.Tuple | None:
    """A literal int (``256``, ``(256)``) or list (``[3, 4]``) as the tuple TF converts it to."""
    if isinstance(node, cst.Integer):
        return cst.Tuple([cst.Element(node.with_changes(lpar=[], rpar=[]))])
    if isinstance(node, cst.List) and node.elements and not any(isinstance(e, cst.StarredElement) for e in node.elements):
        elements = [e.with_changes(comma=cst.MaybeSentinel.DEFAULT) for e in node.elements]
        if len(elements) == 1:
            elements = [elements[0].with_changes(comma=cst.Comma())]
        return cst.Tuple(elements, lpar=node.lpar or [cst.LeftParen()], rpar=node.rpar or [cst.RightParen()])
    return None


def _concatenation(node: cst.CSTNode) -> bool:
    """A shape and a literal int or list added: what ``_Concatenations`` rewrites (the operands'
    kinds are the same before and after it rewrites what they hold)."""
    return isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add) and (
        (_visible_shape(node.left) and _as_tuple(node.right) is not None)
        or (_visible_shape(node.right) and _as_tuple(node.left) is not None))


class _Concatenations(CachedHooks):
    def leave_BinaryOperation(self, original, updated):
        if not isinstance(updated.operator, cst.Add):
            return updated
        if _visible_shape(updated.left) and (right := _as_tuple(updated.right)) is not None:
            return updated.with_changes(right=right)
        if _visible_shape(updated.right) and (left := _as_tuple(updated.left)) is not None:
            return updated.with_changes(left=left)
        return updated


class ShapeConcatRule(Rule):
    id = "structure:shape-concat"
    order = 61  # after tensor_methods (60), which turns ``get_shape()`` into ``.shape``

    def leave_statement(self, ctx, original, updated):
        if not isinstance(updated, cst.SimpleStatementLine):
            return None  # a compound statement: its body's statements come here one by one
        if not ctx.scopes.imports_source or not any(map(_concatenation, findall(updated, m.BinaryOperation()))):
            return None  # nothing to rewrite: the statement is not rebuilt
        changed = transform(updated, _Concatenations())
        return changed if not changed.deep_equals(updated) else None


RULE = ShapeConcatRule()
