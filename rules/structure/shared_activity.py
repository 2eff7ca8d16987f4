"""A layer with an activity regularizer called more than once per pass: flagged.

Keras adds the layer's activity penalty at every call; the translation's
``KerasRegularized`` sows it under one name, and a sown term replaces the previous one
(``rules/support/keras_add_loss.py``), so a second call in the same forward pass (a
shared layer in a functional model, ``self.dense`` applied twice) would keep only the last
term. The translation stays, with a TODO at the second call saying the sum is short.
Weight penalties are not affected: Keras counts a shared variable once, as the wrapper does.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.rule import Rule
from tern.engine.nodes import holder
from tern.engine.walk import walk

REASON = ("this layer has an activity regularizer and is called again in the same pass: Keras adds one "
          "penalty per call, the translation keeps the last one only; call a separate layer, or add "
          "`activity_regularizer(outputs) / batch_size` of the other calls to the loss by hand")


def _regularized(ctx, value: cst.BaseExpression) -> bool:
    """``keras.layers.X(..., activity_regularizer=<not None>)`` of a table layer."""
    if not isinstance(value, cst.Call) or ctx.resolve(value.func) not in ctx.tables.layers:
        return False
    return any(a.keyword is not None and a.keyword.value == "activity_regularizer"
               and not m.matches(a.value, m.Name("None")) for a in value.args)


class _Bindings(cst.CSTVisitor):
    def __init__(self, ctx, names: set[str]):
        self.ctx, self.names = ctx, names

    def visit_Assign(self, node: cst.Assign) -> None:
        if _regularized(self.ctx, node.value):
            for target in node.targets:
                key = holder(target.target)
                if key is not None:
                    self.names.add(key)


class SharedActivityRule(Rule):
    id = "structure:shared-activity"
    scope = "models"
    order = 65  # after functional_model tags its builders

    def _stack(self, ctx) -> list:
        return ctx.rule_state.setdefault(self.id, [])

    def visit_class(self, ctx, node):
        if ctx.keras_class is not None:
            names: set[str] = set()
            walk(node, _Bindings(ctx, names))
            ctx.rule_state[self.id + ":class"] = names

    def visit_function(self, ctx, node):
        """Calls are counted per function that is one pass: a functional model's graph or a
        Keras class's method (elsewhere each call of a layer is a pass of its own)."""
        names: set[str] = set()
        if ctx.keras_class is not None and ctx.frame.in_module_method:
            names |= {n for n in ctx.rule_state.get(self.id + ":class", ()) if n.startswith("self.")}
            walk(node, _Bindings(ctx, names))
        elif "functional" in ctx.frame.tags:
            walk(node, _Bindings(ctx, names))
        self._stack(ctx).append((names, {}))

    def leave_function(self, ctx, original, updated):
        self._stack(ctx).pop()
        return None

    def leave_call(self, ctx, original, updated):
        key = holder(original.func)
        stack = self._stack(ctx)
        if key is None or not stack or key not in stack[-1][0]:
            return None
        calls = stack[-1][1]
        calls[key] = calls.get(key, 0) + 1
        if calls[key] > 1:
            ctx.todo(f"{key} (shared)", REASON)
        return None


RULE = SharedActivityRule()
