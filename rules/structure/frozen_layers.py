"""Package code that freezes layers (``layer.trainable = False``) sets the model's flags table.

Fine-tuning code walks a model's layers and freezes all but the head::

    for layer in model.layers:                    for layer in KerasLayer.all(model):
        if layer.name != head_name:        ->         if layer.name != head_name:
            layer.trainable = False                       layer.trainable = False

    model.get_layer("encoder").trainable = False  ->  KerasLayer.get(model, "encoder").trainable = False

``KerasLayer`` (support) is a view of a top-level layer of the Flax module; its
``trainable`` lives in the module's ``KerasTrainable`` table, which every train state
built for the module reads (``KerasTrainState.of_module``: frozen params get no update,
no decay, no optimizer slots, as Keras' optimizer only sees ``trainable_variables``).
The loop is rewritten only when its body uses the layer for ``.name`` and ``.trainable``
alone (the views list the layers that hold variables, so other uses could tell the
lists apart). Any other ``trainable`` assignment (``model.trainable = False``, a layer
attribute of a class) gets a TODO.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.rule import Rule
from tern.engine.walk import findall

KEY = "frozen_layers"
VIEW_ATTRS = frozenset({"name", "trainable"})
REASON = ("Keras' trainable flag: only `layer.trainable = ...` on the layers of `for layer in model.layers` or on "
          "`model.get_layer(name)` (functions outside classes) is translated, to the module's KerasTrainable table")


def _state(ctx) -> dict[str, set[int]]:
    return ctx.rule_state.setdefault(KEY, {"layers": set(), "get_layer": set(), "assigns": set()})


def _loop_ok(loop: cst.For) -> bool:
    """The loop variable is used only as ``L.name`` / ``L.trainable`` (read or assigned)."""
    if not (isinstance(loop.target, cst.Name) and loop.orelse is None):
        return False
    var = loop.target.value
    uses = findall(loop.body, m.Name(var))
    attrs = findall(loop.body, m.Attribute(value=m.Name(var)))
    if any(a.attr.value not in VIEW_ATTRS for a in attrs) or len(attrs) != len(uses):
        return False
    return not findall(loop.body, m.Break() | m.Return() | m.Yield() | m.Continue())


def _trainable_targets(node: cst.CSTNode):
    for assign in findall(node, m.Assign() | m.AugAssign()):
        targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else [assign.target]
        for t in targets:
            if m.matches(t, m.Attribute(attr=m.Name("trainable"))):
                yield t


class FrozenLayersRule(Rule):
    id = "structure:frozen-layers"
    scope = "models"
    order = 44

    def visit_function(self, ctx, node):
        if ctx.keras_class is not None or len(ctx.frames) != 1:
            return
        state = _state(ctx)
        translated = m.Call(func=m.Attribute(value=m.Name("KerasLayer"), attr=m.Name("all")))  # a rerun on the output
        for loop in findall(node.body, m.For(iter=m.Attribute(value=m.Name(), attr=m.Name("layers")) | translated)):
            if _loop_ok(loop):
                if not m.matches(loop.iter, translated):
                    state["layers"].add(id(loop.iter))
                state["assigns"].update(id(t) for t in _trainable_targets(loop.body)
                                        if m.matches(t, m.Attribute(value=m.Name(loop.target.value))))
        for target in _trainable_targets(node.body):
            if m.matches(target.value, m.Call(func=m.Attribute(value=m.Name("KerasLayer"), attr=m.Name("get")))):
                state["assigns"].add(id(target))
                continue
            if m.matches(target, m.Attribute(value=m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("get_layer"))))) \
                    and len(target.value.args) == 1 and not target.value.args[0].keyword and not target.value.args[0].star:
                state["get_layer"].add(id(target.value))
                state["assigns"].add(id(target))

    def leave_attribute(self, ctx, original, updated):
        if id(original) not in _state(ctx)["layers"]:
            return None
        return cst.Call(cst.Attribute(cst.Name("KerasLayer"), cst.Name("all")), [cst.Arg(updated.value)])

    def leave_call(self, ctx, original, updated):
        if id(original) not in _state(ctx)["get_layer"]:
            return None
        return cst.Call(cst.Attribute(cst.Name("KerasLayer"), cst.Name("get")), [
            cst.Arg(updated.func.value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            updated.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)])

    def leave_statement(self, ctx, original, updated):
        if not ctx.mentions("trainable"):
            return None  # no ``X.trainable = ...`` in the file
        done = _state(ctx)["assigns"]
        for target in _trainable_targets(original):
            if id(target) not in done:
                ctx.todo("layer.trainable", REASON)
        return None


RULE = FrozenLayersRule()
