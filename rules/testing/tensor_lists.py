"""``self.assertEqual(vals[0], [-9.0])``: a value compared with a list of numbers, as TF compares it.

In a ``tf.test.TestCase``, ``assertEqual`` is unittest's ``first == second``: a tensor's
``==`` converts the list to the tensor's dtype, compares element by element with
broadcasting, and the one-element result decides. A JAX array refuses to compare with a
list (``TypeError``), so the translated test would fail where the original passed. It
becomes ``numpy.testing.assert_array_equal`` against the list in the value's own dtype
(``1e-05`` as float32 equals float32's ``1e-05``, as in TF), broadcasting as TF's ``==``.

Only a list display of number literals against a name, an attribute or a subscript of one
(no call, which the rewrite would run twice); ``x.shape`` is ``shape_lists.py``'s. Where the
value is a Python list, numpy compares it the same, except that it broadcasts nested lists.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.nodes import self_attribute
from tern.engine.rule import Rule
from tern.engine.walk import findall

ASSERTIONS = frozenset({"assertEqual", "assertEquals"})
NUMBER = m.Integer() | m.Float() | m.UnaryOperation(operator=m.Minus(), expression=m.Integer() | m.Float())
VALUE = m.Name() | m.Attribute() | m.Subscript()


def _numbers(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.List) and bool(node.elements) and all(
        isinstance(e, cst.Element) and m.matches(e.value, NUMBER) for e in node.elements)


def _plain_value(node: cst.BaseExpression) -> bool:
    """A name, attribute or subscript chain with no call in it, and not a ``.shape``."""
    if not m.matches(node, VALUE) or findall(node, m.Call()):
        return False
    return not m.matches(node, m.Attribute(attr=m.Name("shape")))


class TensorListsRule(Rule):
    id = "testing:tensor-lists"
    scope = "tests"
    order = 61  # after shape_lists (60), before assertions (70)

    def leave_call(self, ctx, original, updated):
        if not self_attribute(updated.func):
            return None
        if updated.func.attr.value not in ASSERTIONS or not ctx.rule_state.get("tf_testcase_depth"):
            return None
        args = updated.args
        if len(args) not in (2, 3) or any(a.keyword or a.star for a in args):
            return None
        first, second = args[0].value, args[1].value
        if _plain_value(first) and _numbers(second):
            value, expected = first, second
        elif _plain_value(second) and _numbers(first):
            value, expected = second, first
        else:
            return None
        dtype = cst.Attribute(cst.Call(ctx.target_name("numpy.asarray"), [cst.Arg(value)]), cst.Name("dtype"))
        typed = cst.Call(ctx.target_name("numpy.asarray"), [
            cst.Arg(expected, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            cst.Arg(dtype, keyword=cst.Name("dtype"), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))])
        new = [cst.Arg(first if value is first else typed), cst.Arg(typed if value is first else second)]
        if len(args) == 3:
            new.append(cst.Arg(args[2].value, keyword=cst.Name("err_msg"),
                               equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
        new = [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for a in new[:-1]] + [new[-1]]
        return cst.Call(ctx.target_name("numpy.testing.assert_array_equal"), new)


RULE = TensorListsRule()
