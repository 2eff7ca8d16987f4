"""Keras training API on objects tern cannot type: flagged, never passed through.

``model.fit(...)``, ``optimizer.apply_gradients(...)`` or ``model.trainable_variables`` on
a model that arrives as an argument look like any method call to the translator. Left
as written they fail at run time in JAX, and the file would count as translated. In a
file that imports TensorFlow or Keras they get a TODO instead, until training rules
translate them. Test files have their own rule (``testing/module_calls.py``), which
knows the modules their tests build.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.support_module import names as support_names
from tern.engine.rule import Rule
from tern.engine.results import code

METHODS = frozenset({
    "compile", "fit", "evaluate", "predict", "train_on_batch", "test_on_batch", "predict_on_batch",
    "apply_gradients", "minimize", "add_loss", "get_weights", "set_weights", "save_weights", "load_weights",
    "get_layer", "reset_metrics",
})
ATTRIBUTES = frozenset({"trainable_variables", "trainable_weights", "non_trainable_variables", "non_trainable_weights",
                        "losses"})
REASON = ("Keras training API, if this is a Keras model or optimizer: no Flax counterpart yet "
          "(write the train state, optax step and loop, or leave it to the LLM fallback)")


def _root(node: cst.BaseExpression) -> cst.BaseExpression:
    """The leftmost name of ``a.b(c).d``: what the chain starts from."""
    while isinstance(node, (cst.Attribute, cst.Call, cst.Subscript)):
        node = node.value if isinstance(node, (cst.Attribute, cst.Subscript)) else node.func
    return node


def _receiver(node: cst.BaseExpression) -> str:
    text = code(node)
    return text if len(text) <= 40 else "..."


class KerasTrainingApiRule(Rule):
    id = "structure:keras-training-api"
    scope = "models"
    order = 95  # after every rule that translates such a call where it knows the receiver

    def visit_function(self, ctx, node):
        if len(ctx.frames) == 1:
            params = {p.name.value for p in (*node.params.params, *node.params.kwonly_params)}
            ctx.rule_state.setdefault("state_params", {})[node.name.value] = params

    def leave_call(self, ctx, original, updated):
        func = original.func
        if isinstance(func, cst.Attribute) and func.attr.value in METHODS:
            if func.attr.value == "apply_gradients" and any(a.keyword and a.keyword.value == "grads" for a in original.args):
                return None  # flax's TrainState.apply_gradients(grads=...): Keras' takes pairs, positionally
            if func.attr.value == "add_loss" and ctx.keras_class is not None and cst.ensure_type(func, cst.Attribute).value.deep_equals(cst.Name("self")):
                return None  # a Keras class's own add_loss: rules/structure/add_loss.py
            self._flag(ctx, func)
        return None

    def leave_attribute(self, ctx, original, updated):
        if original.attr.value in ATTRIBUTES:
            self._flag(ctx, original)
        return None

    @staticmethod
    def _flag(ctx, node: cst.Attribute) -> None:
        if not ctx.scopes.imports_source or ctx.resolve(node) is not None:
            return  # a file with no TF, or a TF/Keras symbol itself: the tables' business
        if ctx.frames and ctx.frames[0].tags & {"train_step", "multi_step", "train_state", "step_override"}:
            return  # a step, a state-passing function or a Keras step override: tern/features/training/train_steps.py,
            # tern/features/training/step_overrides.py checked every such use
        root = _root(node.value)
        if node.attr.value == "predict" and m.matches(node.value, m.Name()) and _is_state_param(ctx, node.value.value):
            return  # tern's train state (support/KerasTrainState.py), met again when a translation is rerun
        if isinstance(root, cst.Name) and root.value in support_names():
            return  # tern's own support API (``KerasTrainer.of(model).fit``), a translation already
        if id(node) in ctx.rule_state.get("compiled_model_handled", ()):
            return  # compiled_model_calls.py gave this call its own, more precise TODO
        ctx.todo(f"{_receiver(node.value)}.{node.attr.value}", REASON)



def _is_state_param(ctx, name: str) -> bool:
    """A parameter named ``state`` / ``<model>_state`` of the enclosing top-level function (tern names
    the train states it passes so, and refuses to translate functions that already use the name)."""
    fn = ctx.frames[0].name if ctx.frames else None
    return fn is not None and (name == "state" or name.endswith("_state")) and name in ctx.rule_state.get(
        "state_params", {}).get(fn, ())


RULE = KerasTrainingApiRule()
