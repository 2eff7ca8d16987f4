"""Tests compile, fit, evaluate and predict their models as they did with Keras.

A test keeps its model objects; each model's Keras state lives in its ``KerasTrainer``
(rules/support/KerasTrainer.py, attached to the module object, shared with package code).
The tests also share a registry of variables (``_TERN_VARIABLES``,
``testing/module_calls.py``) for ``model(x)`` and ``model.trainable_variables``. One helper
keeps the two in step (``support/registry_trainer.py``)::

    model.fit(x, y, epochs=2)                ->  _tern_trainer(model).fit(x, y, epochs=2)
    model.optimizer.iterations               ->  _tern_trainer(model).iterations
    model.optimizer.learning_rate            ->  _tern_trainer(model).learning_rate
    history = train(model, x, y)             ->  history = train(_tern_shared(model), x, y)

``_tern_trainer(model)`` hands the registry's variables (the newest: the trainer writes
every change back) to the trainer and returns it; ``_tern_shared(model)`` does the same
for a model a package function is about to compile or fit (``tern/features/training/compiled_models.py``
knows which parameters those are) and returns the model. A model is known when the
registry knows it, or when it comes from a package function that returns the model it
is given (``compile_classifier(build_classifier())``). A model whose Keras ``fit`` the
trainer cannot reproduce (a ``train_step`` override, frozen layers) keeps its calls with a
TODO saying why. ``get_weights`` of registry models is ``module_calls.py``'s.
"""

from __future__ import annotations


import libcst as cst
import libcst.matchers as m

from tern.features.training.compiled_models import TRAINER_METHODS, refusal
from tern.engine.results import Refusal
from tern.engine.rule import Rule
from tern.features.training.trainer_calls import call_refusal, rewrite
from tern.features.training import TrainingFacts
from tern.engine.nodes import holder

HANDLED = "compiled_model_handled"  # same key as structure/compiled_model_calls.py: module_calls.py skips these
INLINE = {"keras.Sequential": "keras.Sequential", "keras.models.Sequential": "keras.Sequential",
          "keras.Model": "keras.Model", "keras.models.Model": "keras.Model"}
LAYOUT = ("the model holds layers whose Keras variables are not the Flax arrays as they are (split per gate, or "
          "reshaped), so Keras' weight list has no one-to-one counterpart")


def _tracked(ctx) -> dict[str, frozenset]:
    return ctx.rule_state.setdefault("compiled_model_sources", {})


def _arg(call: cst.Call, params: tuple[str, ...], param: str) -> int | None:
    for i, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == param:
            return i
    if param in params:
        index = params.index(param)
        positional = [i for i, a in enumerate(call.args) if a.keyword is None and not a.star]
        if index < len(positional) and not any(a.star for a in call.args[:positional[index] + 1]):
            return positional[index]
    return None


def sources(ctx, node: cst.BaseExpression) -> frozenset | None:
    """The package classes and functions a model expression comes from (None: not known to be a model)."""
    key = holder(node)
    if key is not None:
        if key in _tracked(ctx):
            return _tracked(ctx)[key]
        kind = ctx.rule_state.get("module_names", {}).get(key)  # module_calls.py's registry names
        if kind is True:
            return frozenset({"keras.Sequential"})
        if isinstance(kind, str) and not kind.startswith("layer:"):
            return frozenset({kind})
        return None
    if not isinstance(node, cst.Call):
        return None
    if isinstance(node.func, cst.Name):
        name = node.func.value
        if ctx.package.is_module_class(name) or name in ctx.package.factories:
            return frozenset({name})
        facts = ctx.package.fact(TrainingFacts).models
        if name in facts.returns_model:
            at = _arg(node, facts.params.get(name, ()), facts.returns_model[name])
            inner = sources(ctx, node.args[at].value) if at is not None else None
            return None if inner is None else inner | {name}
    resolved = ctx.resolve(node.func)
    return frozenset({INLINE[resolved]}) if resolved in INLINE else None


def _layout_differs(ctx, model_sources: frozenset) -> bool:
    layout = frozenset(name.rsplit(".", 1)[-1] for name, r in ctx.tables.layers.items()
                       if not r.weights_one_to_one or any(w.transform for w in r.weights))
    return any(ctx.package.reaches(s, layout) for s in model_sources)


def _call(name: str, arg: cst.BaseExpression) -> cst.Call:
    return cst.Call(func=cst.Name(name), args=[cst.Arg(arg)])


class CompiledModelCallsRule(Rule):
    id = "testing:compiled-model-calls"
    scope = "tests"
    order = 78  # before module_calls.py, which leaves compile/fit/evaluate with a TODO

    def leave_statement(self, ctx, original, updated):
        for small in original.body:
            if not isinstance(small, cst.Assign):
                continue
            for target in small.targets:
                pairs = [(target.target, small.value)]
                if isinstance(target.target, cst.Tuple) and isinstance(small.value, cst.Tuple) \
                        and len(target.target.elements) == len(small.value.elements):
                    pairs = [(t.value, v.value) for t, v in zip(target.target.elements, small.value.elements)]
                for name, value in pairs:
                    key = holder(name)
                    got = sources(ctx, value) if key is not None else None
                    if got is not None:
                        _tracked(ctx)[key] = got
                    elif key is not None:
                        _tracked(ctx).pop(key, None)
        return None

    def leave_call(self, ctx, original, updated):
        func = original.func
        if isinstance(func, cst.Attribute) and func.attr.value in TRAINER_METHODS:
            return self._method(ctx, original, updated)
        if isinstance(func, cst.Name) and func.value in ctx.package.fact(TrainingFacts).models.keras_params:
            return self._package_call(ctx, original, updated)
        return None

    def _method(self, ctx, original, updated):
        func = original.func
        method = func.attr.value
        model_sources = sources(ctx, func.value)
        if model_sources is None:
            return None
        known_to_registry = holder(func.value) in ctx.rule_state.get("module_names", {})
        if method == "get_weights" and known_to_registry:
            return None  # module_calls.py reads the registry in Keras' order
        why = call_refusal(ctx, model_sources, original)
        if why is None and method in ("get_weights", "set_weights") and _layout_differs(ctx, model_sources):
            why = LAYOUT
        out = Refusal(why) if why else rewrite(ctx, original, updated, _call("_tern_trainer", updated.func.value))
        if isinstance(out, Refusal):
            ctx.rule_state.setdefault(HANDLED, set()).add(id(func))
            ctx.todo(f"keras.Model.{method}", out.reason)
            return None
        return out

    def _package_call(self, ctx, original, updated):
        facts = ctx.package.fact(TrainingFacts).models
        params = facts.params.get(original.func.value, ())
        args = list(updated.args)
        wrapped = False
        for param in sorted(facts.keras_params[original.func.value]):
            at = _arg(original, params, param)
            value = original.args[at].value if at is not None else None
            if value is None or m.matches(value, m.Call(func=m.Name("_tern_shared"))) or sources(ctx, value) is None:
                continue  # not a model, or handed over already (a rerun on translated code)
            args[at] = args[at].with_changes(value=_call("_tern_shared", args[at].value))
            wrapped = True
        if not wrapped:
            return None
        return updated.with_changes(args=args)

    def leave_attribute(self, ctx, original, updated):
        inner = original.value
        if not (isinstance(inner, cst.Attribute) and inner.attr.value == "optimizer"):
            return None
        model_sources = sources(ctx, inner.value)
        if model_sources is None or refusal(ctx.package.fact(TrainingFacts).models, model_sources, ctx.package.reaches, "fit"):
            return None
        if original.attr.value not in ("iterations", "learning_rate"):
            ctx.todo(f"keras.Model.optimizer.{original.attr.value}",
                     "the compiled optimizer is an optax transformation: Keras optimizer attributes other than "
                     "`iterations` and `learning_rate` have no counterpart on the trainer")
            return None
        return cst.Attribute(value=_call("_tern_trainer", updated.value.value), attr=cst.Name(original.attr.value))


RULE = CompiledModelCallsRule()
