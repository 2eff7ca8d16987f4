"""``model.compile/fit/evaluate/predict(...)`` in package code become calls on the model's trainer.

::

    def compile_classifier(model):                 def compile_classifier(model):
        model.compile(optimizer="adam",                KerasTrainer.of(model).compile(optimizer=<optax adam>,
                      loss="mse")                          loss=functools.partial(keras_loss, keras_mean_squared_error))
        return model                                   return model

    def train(model, x, y):                        def train(model, x, y):
        return model.fit(x, y, epochs=3)               return KerasTrainer.of(model).fit(x, y, epochs=3)

Keras keeps the compiled configuration, the optimizer and the variables on the model
object; ``KerasTrainer.of(model)`` is the trainer attached to the Flax module object
(rules/support/KerasTrainer.py), so ``compile_classifier(model)`` then ``train(model, ...)``
act on one state, as in Keras. This is explicit at every call site and needs no registry
shared between modules: the module object the callers pass around is the one place both
functions can reach. A receiver is rewritten only where it is known to hold a model
(``tern/features/training/compiled_models.py``: a name bound to a package model, or a parameter every call
in the package passes one); elsewhere ``keras_training_api.py`` flags the call. Also
``model.get_weights()/set_weights()/save_weights()/load_weights()`` (orbax) and
``model.optimizer.iterations``; other ``model.optimizer`` attributes are flagged.
"""

from __future__ import annotations

import libcst as cst

from tern.features.training.compiled_models import TRAINER_METHODS, refusal
from tern.engine.results import Refusal
from tern.engine.rule import Rule
from tern.features.training.trainer_calls import call_refusal, rewrite
from tern.features.training import TrainingFacts

HANDLED = "compiled_model_handled"  # ids of receivers' nodes this rule answered for (keras_training_api skips them)


def _sources(ctx, receiver: cst.BaseExpression):
    """The receiver's sources (or why it is unknown), for a Name in a top-level function or at module level."""
    if not isinstance(receiver, cst.Name) or ctx.classes or len(ctx.frames) > 1:
        return None
    scope = ctx.frames[0].name if ctx.frames else ""
    return ctx.package.fact(TrainingFacts).models.receivers.get(scope, {}).get(receiver.value)


def trainer_of(receiver: cst.BaseExpression) -> cst.Call:
    return cst.Call(func=cst.Attribute(value=cst.Name("KerasTrainer"), attr=cst.Name("of")), args=[cst.Arg(receiver)])


class CompiledModelCallsRule(Rule):
    id = "structure:compiled-model-calls"
    scope = "models"
    order = 60

    def leave_call(self, ctx, original, updated):
        func = original.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in TRAINER_METHODS) or ctx.resolve(func) is not None:
            return None
        sources = _sources(ctx, func.value)
        if sources is None:
            return None
        construct = f"{func.value.value}.{func.attr.value}"
        if isinstance(sources, str):
            if ctx.scopes.imports_source:
                ctx.rule_state.setdefault(HANDLED, set()).add(id(func))
                ctx.todo(construct, f"Keras training API on `{func.value.value}`: {sources}; if it is a Keras model, "
                         f"`KerasTrainer.of({func.value.value}).{func.attr.value}(...)` is its translation")
            return None
        why = call_refusal(ctx, sources, original)
        out = Refusal(why) if why else rewrite(ctx, original, updated, trainer_of(updated.func.value))
        if isinstance(out, Refusal):
            ctx.rule_state.setdefault(HANDLED, set()).add(id(func))
            ctx.todo(construct, out.reason)
            return None
        return out

    def leave_attribute(self, ctx, original, updated):
        inner = original.value
        if not (isinstance(inner, cst.Attribute) and inner.attr.value == "optimizer"):
            return None
        sources = _sources(ctx, inner.value)
        if sources is None or isinstance(sources, str) or refusal(ctx.package.fact(TrainingFacts).models, sources, ctx.package.reaches, "fit"):
            return None
        if original.attr.value != "iterations":
            ctx.todo(f"{inner.value.value}.optimizer.{original.attr.value}",
                     "the compiled optimizer is an optax transformation: Keras optimizer attributes other than "
                     "`iterations` have no counterpart on the trainer")
            return None
        return cst.Attribute(value=trainer_of(updated.value.value), attr=cst.Name("iterations"))


RULE = CompiledModelCallsRule()
