"""Small questions rules ask of LibCST nodes, answered once here instead of in each rule."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m


def holder(node: cst.BaseExpression) -> str | None:
    """The name a value is held under, ``x`` or ``self.x``; None for any other expression."""
    if isinstance(node, cst.Name):
        return node.value
    if m.matches(node, m.Attribute(value=m.Name("self"), attr=m.Name())):
        return "self." + node.attr.value
    return None
