"""``with self.cached_session():`` (and ``self.test_session()``, ``self.session()``) in a
``tf.test.TestCase``: the block's body, unwrapped.

In eager TF (TF2) these helpers hand out a session nobody needs: the body computes values
directly and ``self.evaluate`` only converts them to NumPy (the assertions rule). A JAX test
computes values directly too, so the ``with`` has nothing left to do. Kept with a TODO: a
session the body uses (``sess.run(...)`` is graph-mode code), a ``graph=`` argument (a graph
the body builds ops into), and any argument other than the device switches ``use_gpu`` /
``force_gpu`` (the translation runs on one CPU device).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.dispatch import CachedHooks
from tern.engine.rule import Rule
from tern.engine.walk import findall
from tern.engine.transform import transform

HELPERS = ("cached_session", "test_session", "session")
DEVICE_ONLY = {"use_gpu", "force_gpu"}


def _helper(item: cst.WithItem) -> str | None:
    call = item.item
    if m.matches(call, m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name()))) and call.func.attr.value in HELPERS:
        return call.func.attr.value
    return None


def _why_kept(item: cst.WithItem, body: cst.BaseSuite) -> str | None:
    args = item.item.args
    if any(a.keyword is None or a.keyword.value not in DEVICE_ONLY for a in args):
        return "arguments other than use_gpu/force_gpu (a graph the body builds ops into, a session config) have no eager counterpart"
    if item.asname is not None:
        name = item.asname.name
        if not isinstance(name, cst.Name):
            return "the session is unpacked"
        if findall(body, m.Name(name.value)):
            return f"the body uses the session `{name.value}` (sess.run of graph tensors): graph-mode code, computed eagerly in JAX"
    return None


class _Unwrap(CachedHooks):
    def leave_With(self, original, updated):
        helpers = [(i, _helper(item)) for i, item in enumerate(updated.items)]
        if not any(h for _, h in helpers):
            return updated
        for i, helper in helpers:
            if helper is None:
                continue
            reason = _why_kept(updated.items[i], updated.body)
            if reason is not None:
                comment = f"# TODO(tern): self.{helper}: {reason}"
                if any(line.comment is not None and line.comment.value == comment for line in updated.leading_lines):
                    return updated
                return updated.with_changes(leading_lines=[*updated.leading_lines, cst.EmptyLine(comment=cst.Comment(comment))])
        kept = [item for item, (_, h) in zip(updated.items, helpers) if h is None]
        if kept:
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return updated.with_changes(items=kept)
        body = list(updated.body.body)
        body[0] = body[0].with_changes(leading_lines=[*updated.leading_lines, *body[0].leading_lines])
        return cst.FlattenSentinel(body)


class TestSessionsRule(Rule):
    id = "testing:test-sessions"
    scope = "tests"
    order = 60

    def leave_function(self, ctx, original, updated):
        if not ctx.rule_state.get("tf_testcase_depth"):
            return None
        if not findall(original, m.With(items=[m.ZeroOrMore(), m.WithItem(item=m.Call(func=m.Attribute(
                value=m.Name("self"), attr=m.OneOf(*(m.Name(h) for h in HELPERS))))), m.ZeroOrMore()])):
            return None
        out = transform(updated, _Unwrap())
        return None if out.deep_equals(updated) else out


RULE = TestSessionsRule()
