"""``self.add_loss(value)`` in a Keras layer or model class becomes an explicit loss term.

Keras keeps the value in ``layer.losses`` until the next top-level call; the Flax module
sows it into the ``losses`` collection instead: ``keras_add_loss(self, "add_loss", value)``
(rules/support/keras_add_loss.py), one name per call site, which ``keras_model_losses``
reads back as ``model.losses``. A sown term replaces the one stored under its name, so a
site that runs several times in one pass (a loop, a comprehension) would keep only its last
term where Keras keeps them all: such sites are left with a TODO, as are calls in
``__init__`` (Flax ``setup`` runs before any input exists) and ``build`` (merged into
``__call__``, it would add the term at every call where Keras adds it at the first).
"""

from __future__ import annotations

import libcst as cst

from tern.engine.rule import Rule
from tern.engine.walk import walk

SUPPORT = "keras_add_loss"
_REPEATING = (cst.For, cst.While, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.Lambda)


def _is_add_loss(call: cst.Call) -> bool:
    """``self.add_loss(...)`` (asked of every call of a layer's methods: no matcher)."""
    func = call.func
    return func.__class__ is cst.Attribute and func.attr.value == "add_loss" \
        and func.value.__class__ is cst.Name and func.value.value == "self"


class _Sites(cst.CSTVisitor):
    """``self.add_loss(...)`` calls of a class's own methods that may run more than once per call."""

    def __init__(self):
        self.repeated: set[int] = set()
        self._depth = 0  # enclosing loops, comprehensions, lambdas and nested functions
        self._functions = 0

    def visit_ClassDef(self, node) -> bool:
        return self._functions == 0  # a nested class is its own business

    def visit_FunctionDef(self, node) -> None:
        self._functions += 1
        if self._functions > 1:
            self._depth += 1

    def leave_FunctionDef(self, node) -> None:
        if self._functions > 1:
            self._depth -= 1
        self._functions -= 1

    def on_visit(self, node) -> bool:
        if isinstance(node, _REPEATING):
            self._depth += 1
        if self._depth and isinstance(node, cst.Call) and _is_add_loss(node):
            self.repeated.add(id(node))
        return super().on_visit(node)

    def on_leave(self, node) -> None:
        super().on_leave(node)
        if isinstance(node, _REPEATING):
            self._depth -= 1


class AddLossRule(Rule):
    id = "structure:add-loss"
    order = 60  # before keras_training_api, which leaves these calls to this rule

    def visit_class(self, ctx, node):
        if ctx.keras_class is None:
            return
        sites = _Sites()
        if ctx.mentions("add_loss"):  # else the class has no site to walk to
            walk(node, sites)
        state = ctx.rule_state.setdefault(self.id, {})
        state[id(ctx.keras_class)] = {"repeated": sites.repeated, "names": 0}

    def leave_call(self, ctx, original, updated):
        info, frame = ctx.keras_class, ctx.frame
        if info is None or frame is None or not frame.in_module_method or not _is_add_loss(original):
            return None
        if info.refusal:
            return None  # the class stays Keras (its TODO says why), and so does this call
        state = ctx.rule_state[self.id][id(info)]
        if frame.name in ("__init__", "build"):
            ctx.todo("self.add_loss", f"in `{frame.name}`: Keras records it once, before or at the first call; "
                     "a Flax module can sow a term only while it is applied: add it in `call`")
            return None
        if id(original) in state["repeated"]:
            ctx.todo("self.add_loss", "inside a loop, comprehension or nested function: each run is a separate "
                     "Keras loss term, and a sown term replaces the previous one under its name; accumulate "
                     "the terms and add their sum once")
            return None
        args = updated.args
        if len(args) != 1 or args[0].star or (args[0].keyword is not None and args[0].keyword.value != "loss"):
            ctx.todo("self.add_loss", "expected exactly one argument, the loss")
            return None
        name = "add_loss" + (f"_{state['names']}" if state["names"] else "")
        state["names"] += 1
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        return cst.Call(func=cst.Name(SUPPORT), args=[
            cst.Arg(cst.Name("self"), comma=comma),
            cst.Arg(cst.SimpleString(f'"{name}"'), comma=comma),
            cst.Arg(args[0].value),
        ])


RULE = AddLossRule()
