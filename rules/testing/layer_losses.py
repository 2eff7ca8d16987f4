"""``layer.losses`` / ``model.losses`` in tests, read right after a call of that module.

Keras' list holds the ``add_loss`` and activity terms of the layer's last call plus the
weight penalties of its *current* weights. The translated modules sow all of them into the
``losses`` collection during the pass, and ``_tern_apply`` (``module_calls.py``) applies
with every collection mutable and keeps the result, so after ``_tern_apply(model, x)``
``keras_model_losses(_tern_variables(model))`` is Keras' list (same number of terms, same
sum), *if* nothing changed the weights or called the module again since. That is what is
checked: the read is translated when, in the same function, the last thing that happened
to the name on every path was a direct call of it; a use in between (passed to a function
that may train it, a method called, rebound, a loop or ``try`` whose paths differ) leaves a
TODO. Names the module registry does not know are not this rule's business.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.rule import Rule
from tern_rules.testing import module_calls
from tern.engine.nodes import holder
from tern.engine.walk import children, findall, walk

SUPPORT = "keras_model_losses"
REASON = ("Keras recomputes weight penalties from the current weights and keeps the terms of the last call; "
          "tern reads the terms the module recorded at its last call only right after a direct call of it in the "
          "same function, with no other use in between (here it may have been trained, rebuilt or not called)")
_ASSERTIONS = m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name(value=m.MatchIfTrue(
    lambda name: name.startswith(("assert", "fail"))))))


def _is_read(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Attribute) and node.attr.value == "losses" and holder(node.value) is not None


class _Flow:
    """Which ``X.losses`` reads of one function follow a call of ``X`` on every path."""

    def __init__(self):
        self.reads: dict[int, bool] = {}

    # -- statements --------------------------------------------------------------------
    def block(self, stmts, state: dict[str, bool]) -> dict[str, bool]:
        for stmt in stmts:
            state = self.statement(stmt, state)
        return state

    def statement(self, stmt, state):
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                self.small(small, state)
            return state
        if isinstance(stmt, cst.If):
            self.expr(stmt.test, state)
            then = self.block(stmt.body.body, dict(state))
            other = self.orelse(stmt.orelse, dict(state))
            return _meet(then, other)
        if isinstance(stmt, (cst.For, cst.While)):
            if isinstance(stmt, cst.For):
                self.expr(stmt.iter, state)
                self.poison(stmt.target, state)
            else:
                self.expr(stmt.test, state)
            once = self.block(stmt.body.body, dict(state))  # reads see the first run ...
            again = self.block(stmt.body.body, _meet(state, once))  # ... and every later one
            return self.orelse(stmt.orelse, _meet(state, again))
        if isinstance(stmt, cst.With):
            for item in stmt.items:
                self.expr(item.item, state)
                if item.asname is not None:
                    self.poison(item.asname.name, state)
            after = self.block(stmt.body.body, dict(state))
            return _meet(state, after)  # the body may stop early (pytest.raises)
        self.poison(stmt, state)  # try, match, nested definitions: no reads trusted there
        return state

    def orelse(self, node, state):
        if node is None:
            return state
        if isinstance(node, cst.If):
            return self.statement(node, state)
        return self.block(node.body.body, state)

    def small(self, small, state) -> None:
        if isinstance(small, cst.Assign):
            self.expr(small.value, state)
            for target in small.targets:
                self.poison(target.target, state)
        elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
            if small.value is not None:
                self.expr(small.value, state)
            self.poison(small.target, state)
        else:
            self.expr(small, state)

    # -- expressions, in evaluation order ------------------------------------------------
    def expr(self, node: cst.CSTNode, state) -> None:
        if _is_read(node):
            key = holder(node.value)
            self.reads[id(node)] = self.reads.get(id(node), True) and state.get(key, False)
            return
        if isinstance(node, cst.Call):
            key = holder(node.func)
            if key is None:
                if isinstance(node.func, cst.Attribute):
                    self.expr(node.func.value, state)  # a method call uses its receiver
                else:
                    self.expr(node.func, state)
            for arg in node.args:
                self.expr(arg.value, state)
            if key is not None:
                state[key] = True  # a direct call: its terms are the module's last ones
            elif not m.matches(node, _ASSERTIONS) and m.matches(node.func, m.Attribute(value=m.Name("self"))):
                _stale_self(state)  # a helper method may use any module it holds
            return
        if isinstance(node, (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp,
                             cst.IfExp, cst.BooleanOperation, cst.NamedExpr)):
            self.poison(node, state)  # may run zero or several times
            return
        key = holder(node)
        if key is not None:
            state[key] = False
            if key == "self":
                _stale_self(state)
            return
        if isinstance(node, cst.Attribute):
            self.expr(node.value, state)
            return
        for child in children(node):
            self.expr(child.value if isinstance(child, cst.Arg) else child, state)  # a keyword is no use

    def poison(self, node: cst.CSTNode, state) -> None:
        """Every name used in ``node`` is stale afterwards; no read inside is trusted."""
        flow = self

        class V(cst.CSTVisitor):
            def visit_Attribute(self, attr: cst.Attribute) -> bool:
                if _is_read(attr):
                    flow.reads[id(attr)] = False
                key = holder(attr)
                if key is not None:
                    state[key] = False
                return True

            def visit_Name(self, name: cst.Name) -> None:
                state[name.value] = False
                if name.value == "self":
                    _stale_self(state)

        walk(node, V())


def _stale_self(state) -> None:
    for key in state:
        if key.startswith("self."):
            state[key] = False


def _meet(a: dict[str, bool], b: dict[str, bool]) -> dict[str, bool]:
    return {k: a.get(k, False) and b.get(k, False) for k in a.keys() | b.keys()}


class LayerLossesRule(Rule):
    id = "testing:layer-losses"
    scope = "tests"
    order = 75  # before module_calls, which turns the calls it reads into _tern_apply

    def visit_function(self, ctx, node):
        reads = ctx.rule_state.setdefault(self.id, {})
        if not ctx.mentions("losses") or not findall(node.body, m.Attribute(attr=m.Name("losses"))):
            return  # no ``X.losses`` to judge: the flow would record nothing
        flow = _Flow()
        flow.block(node.body.body, {})
        reads.update(flow.reads)

    def leave_attribute(self, ctx, original, updated):
        if not _is_read(original) or module_calls.RULE._instance(ctx, original.value) is None:
            return None
        if not ctx.rule_state.get(self.id, {}).get(id(original)):
            ctx.todo(f"{holder(original.value)}.losses", REASON)
            return None
        variables = cst.Call(func=cst.Name("_tern_variables"), args=[cst.Arg(updated.value)])
        return cst.Call(func=cst.Name(SUPPORT), args=[cst.Arg(variables)])


RULE = LayerLossesRule()
