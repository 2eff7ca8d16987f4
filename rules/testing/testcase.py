"""``tf.test.TestCase`` to ``absltest.TestCase`` (its base: absl's assertions such as
``assertLen``/``assertEmpty`` keep working; pytest runs it), ``tf.test.main()`` to
``absltest.main()``, and two statements dropped from tests: ``tf.random.set_seed`` (JAX
randomness in translated tests uses explicit, fixed keys, so seeding has nothing left to do)
and ``tf.config.set_soft_device_placement(...)`` (whether TF may move an op without a kernel
on the requested GPU/TPU to the CPU: translated tests run on one JAX CPU device and place
nothing, so the switch has nothing to act on; values are the same either way).

Keeps a per-file count of open TF test classes so the assertion rule knows when
``self.assertAllClose`` is TF's.
"""

from __future__ import annotations

import libcst as cst

from tern.engine.rule import Rule

TESTCASE = "tensorflow.test.TestCase"
MAIN = "tensorflow.test.main"
SET_SEED = {"tensorflow.random.set_seed", "keras.utils.set_random_seed", "tensorflow.keras.utils.set_random_seed"}
SOFT_PLACEMENT = "tensorflow.config.set_soft_device_placement"
DROPPED = {*SET_SEED, SOFT_PLACEMENT}


class TestCaseRule(Rule):
    id = "testing:testcase"
    consumes = frozenset({TESTCASE, MAIN, *DROPPED})
    scope = "tests"
    order = 5

    def visit_class(self, ctx, node):
        stack = ctx.rule_state.setdefault("tf_testcase_stack", [])
        is_tf = any(ctx.resolve(b.value) == TESTCASE for b in node.bases)
        stack.append(is_tf)
        ctx.rule_state["tf_testcase_depth"] = sum(stack)

    def leave_class(self, ctx, original, updated):
        stack = ctx.rule_state["tf_testcase_stack"]
        is_tf = stack.pop()
        ctx.rule_state["tf_testcase_depth"] = sum(stack)
        if not is_tf:
            return None
        bases = []
        others = [b for b in original.bases if ctx.resolve(b.value) != TESTCASE]
        for orig, new in zip(original.bases, updated.bases):
            if ctx.resolve(orig.value) == TESTCASE:
                if others:
                    continue  # e.g. parameterized.TestCase already is an absltest.TestCase
                new = new.with_changes(value=ctx.target_name("absl.testing.absltest.TestCase"))
            bases.append(new)
        bases = [b.with_changes(comma=cst.MaybeSentinel.DEFAULT) if i == len(bases) - 1 else b for i, b in enumerate(bases)]
        return updated.with_changes(bases=bases)

    def leave_call(self, ctx, original, updated):
        if ctx.resolve(original.func) == MAIN:
            return cst.Call(func=ctx.target_name("absl.testing.absltest.main"), args=updated.args)
        return None

    def leave_statement(self, ctx, original, updated):
        if len(original.body) == 1 and original.body[0].__class__ is cst.Expr and original.body[0].value.__class__ is cst.Call:
            if ctx.resolve(original.body[0].value.func) in DROPPED:
                return cst.RemoveFromParent()
        return None


RULE = TestCaseRule()
