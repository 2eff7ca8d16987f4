"""``self.assertEqual(y.shape, [2, 3])``: the expected shape as a tuple.

A TF tensor's ``shape`` is a ``TensorShape``, equal to a list of the same dimensions; a JAX
array's ``shape`` is a tuple, never equal to a list. A TF test that passes this assertion
compared a TensorShape (a NumPy shape would have failed it), so in the translated test the
list display becomes a tuple display with the same elements.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.nodes import self_attribute
from tern.engine.rule import Rule

ASSERTIONS = frozenset({"assertEqual", "assertEquals"})
SHAPE = m.Attribute(attr=m.Name("shape"))


def _tuple(node: cst.List) -> cst.Tuple:
    elements = list(node.elements)
    if len(elements) == 1:  # (d,) needs its comma
        elements[0] = elements[0].with_changes(comma=cst.Comma())
    return cst.Tuple(elements=elements, lpar=node.lpar or [cst.LeftParen()], rpar=node.rpar or [cst.RightParen()])


class ShapeListsRule(Rule):
    id = "testing:shape-lists"
    scope = "tests"
    order = 60  # before assertions (70) may rewrite the call

    def leave_call(self, ctx, original, updated):
        if not self_attribute(updated.func):
            return None
        if updated.func.attr.value not in ASSERTIONS or len(updated.args) < 2:
            return None
        first, second = updated.args[0].value, updated.args[1].value
        if m.matches(first, SHAPE) and isinstance(second, cst.List):
            args = [updated.args[0], updated.args[1].with_changes(value=_tuple(second)), *updated.args[2:]]
        elif m.matches(second, SHAPE) and isinstance(first, cst.List):
            args = [updated.args[0].with_changes(value=_tuple(first)), *updated.args[1:]]
        else:
            return None
        return updated.with_changes(args=args)


RULE = ShapeListsRule()
