"""``tf.test.TestCase`` assertion helpers (``self.assertAllClose`` ...) to numpy/unittest.

The mapping is the table ``assertions.toml`` beside this file; tolerances TF applies by
default are written out. Only methods called on ``self`` inside a class that derived
from ``tf.test.TestCase`` are rewritten (an absl ``parameterized.TestCase`` has its own
``assertLen``, which is left alone there only when TF's base was not present).
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

import libcst as cst
import libcst.matchers as m

from tern.engine.nodes import self_attribute
from tern.engine.records import api_record
from tern.engine.render import bind, map_arguments
from tern.engine.results import Refusal
from tern.engine.rule import Rule
from tern.engine.templates import expand_template

TABLE = Path(__file__).with_name("assertions.toml")


@functools.cache
def methods():
    data = tomllib.loads(TABLE.read_text(encoding="utf-8"))
    return {raw["source"]: api_record(raw, f"testing/assertions.toml#{i}") for i, raw in enumerate(data["method"])}


@functools.cache
def structured() -> dict[str, str]:
    """Per method, the template for arguments that are visibly dicts (the table's ``structured``)."""
    data = tomllib.loads(TABLE.read_text(encoding="utf-8"))
    return {raw["source"]: raw["structured"] for raw in data["method"] if "structured" in raw}


DICT = m.Dict() | m.DictComp() | m.Call(func=m.Name("dict"))
STATE = "assertions_dicts"  # per function frame: local names bound to a dict display


def _dict_names(ctx) -> set[str]:
    return ctx.rule_state.setdefault(STATE, {}).setdefault(id(ctx.frame), set())


class AssertionsRule(Rule):
    id = "testing:assertions"
    scope = "tests"
    order = 70

    def visit_function(self, ctx, node):
        ctx.rule_state.setdefault(STATE, {})[id(ctx.frame)] = set()  # a new frame (an earlier one's id may be reused)

    def leave_statement(self, ctx, original, updated):
        """Remember the names this function binds to a dict display, for the assertions that follow."""
        if isinstance(updated, cst.SimpleStatementLine):
            for small in updated.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                    names = _dict_names(ctx)
                    (names.add if m.matches(small.value, DICT) else names.discard)(small.targets[0].target.value)
        return None

    def leave_call(self, ctx, original, updated):
        if not self_attribute(updated.func):
            return None
        if not ctx.rule_state.get("tf_testcase_depth"):
            return None
        record = methods().get(updated.func.attr.value)
        if record is None:
            return None
        bound = bind(updated, record.signature.params)
        if isinstance(bound, Refusal):
            ctx.todo(f"self.{record.source}", bound.reason)
            return None
        mapped = map_arguments(record.signature, bound, ctx)
        if isinstance(mapped, Refusal):
            ctx.todo(f"self.{record.source}", mapped.reason)
            return None
        template = record.template
        if record.source in structured() and any(_is_dict(ctx, bound.args.get(p)) for p in ("a", "b")):
            template = structured()[record.source]
        out = expand_template(template, mapped, ctx, record.signature.defaults)
        if isinstance(out, Refusal):
            ctx.todo(f"self.{record.source}", out.reason)
            return None
        return out


def _is_dict(ctx, node: cst.BaseExpression | None) -> bool:
    return node is not None and (m.matches(node, DICT) or (isinstance(node, cst.Name) and node.value in _dict_names(ctx)))


RULE = AssertionsRule()
