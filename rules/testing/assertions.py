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

import libcst.matchers as m

from tern.convert import Refusal
from tern.records import _api
from tern.render import bind, expand_template, map_arguments
from tern.rule import Rule

TABLE = Path(__file__).with_name("assertions.toml")


@functools.cache
def methods():
    data = tomllib.loads(TABLE.read_text(encoding="utf-8"))
    return {raw["source"]: _api(raw, f"testing/assertions.toml#{i}") for i, raw in enumerate(data["method"])}


class AssertionsRule(Rule):
    id = "testing:assertions"
    scope = "tests"
    order = 70

    def leave_call(self, ctx, original, updated):
        if not m.matches(updated.func, m.Attribute(value=m.Name("self"), attr=m.Name())):
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
        out = expand_template(record.template, mapped, ctx, record.signature.defaults)
        if isinstance(out, Refusal):
            ctx.todo(f"self.{record.source}", out.reason)
            return None
        return out


RULE = AssertionsRule()
