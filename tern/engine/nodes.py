"""Small questions rules ask of LibCST nodes, answered once here instead of in each rule."""

from __future__ import annotations

import libcst as cst


def self_attribute(node: cst.CSTNode) -> bool:
    """``self.x``: what ``m.Attribute(value=m.Name("self"), attr=m.Name())`` matches, asked of
    every call's function by several rules, at a tenth of a matcher's cost."""
    return node.__class__ is cst.Attribute and node.value.__class__ is cst.Name and node.value.value == "self"


def holder(node: cst.BaseExpression) -> str | None:
    """The name a value is held under, ``x`` or ``self.x``; None for any other expression."""
    if isinstance(node, cst.Name):
        return node.value
    if self_attribute(node):
        return "self." + node.attr.value
    return None


def assigns_a_call_to_a_name(stmt: cst.CSTNode) -> bool:
    """``name = f(...)``, alone on its line (a matcher's test, without a matcher's cost: it runs
    on every statement of every function)."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return False
    assign = stmt.body[0]
    return len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name) and isinstance(assign.value, cst.Call)
