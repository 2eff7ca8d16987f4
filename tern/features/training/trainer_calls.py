"""``model.compile/fit/evaluate/predict(...)`` on a known model, as a call on its trainer.

The trainer (rules/support/KerasTrainer.py) has Keras' signatures and defaults, so the
arguments pass through as written, except what Keras resolves by itself:

- strings: ``optimizer="adam"``, ``loss="mse"``, ``metrics=["mae", "accuracy"]`` become
  the translation of the object Keras makes of them (``rules/values/compile.toml``, kinds
  ``optimizer``, ``loss``, ``metric``); a string with no record is refused;
- ``compile()`` without an optimizer: Keras' default, RMSprop, is written out;
- what the trainer does not do is refused: per-output losses, metrics and loss weights
  (dict or nested literals), ``class_weight``, the strings ``"crossentropy"``/``"ce"``
  (chosen from run-time shapes), and callbacks without a translation in a literal list.

Which receivers are models is ``tern/features/training/compiled_models.py``'s business; this module only
rewrites one call for the two rules that use it (``structure/compiled_model_calls.py``,
``testing/compiled_model_calls.py``).
"""

from __future__ import annotations

import ast
import re

import libcst as cst

from tern.features.training.compiled_models import TRAINER_METHODS, refusal
from tern.engine.results import Refusal
from tern.engine.results import code
from tern.features.training.feature import TrainingFacts

COMPILE = ("optimizer", "loss", "loss_weights", "metrics", "weighted_metrics", "run_eagerly",
           "steps_per_execution", "jit_compile", "auto_scale_loss")
FIT = ("x", "y", "batch_size", "epochs", "verbose", "callbacks", "validation_split", "validation_data", "shuffle",
       "class_weight", "sample_weight", "initial_epoch", "steps_per_epoch", "validation_steps",
       "validation_batch_size", "validation_freq")
DEFAULT_OPTIMIZER = "rmsprop"  # Keras' compile(optimizer="rmsprop")
SHUFFLE_NOTE = ("each epoch's order of the samples is drawn from numpy.random.default_rng(seed) of the model's "
                "KerasTrainer (seed 0, or the seed of its first KerasTrainer.of(model, seed=...)); Keras draws it from TensorFlow's "
                "generator (keras.utils.set_random_seed): reproducible, but not Keras' order (a tf.data dataset keeps "
                "its own shuffling)")
CHECKPOINT_NOTE = ("writes/reads an orbax checkpoint (a directory) under the Keras file name, holding the Flax "
                   "variables: not Keras' .weights.h5 format")
BY_SHAPE = ("crossentropy", "ce")


def rewrite(ctx, original: cst.Call, updated: cst.Call, trainer: cst.BaseExpression) -> cst.Call | Refusal:
    """``trainer.<method>(...)`` for ``original`` (``model.<method>(...)``), or why not."""
    method = original.func.attr.value
    if method not in TRAINER_METHODS:
        return Refusal(f"`{method}` is not a method the trainer stands in for")
    args = list(updated.args)
    if method == "compile":
        out = _compile_args(ctx, original, args)
    elif method == "fit":
        out = _fit_args(ctx, original, args)
    else:
        out = args
    if isinstance(out, Refusal):
        return out
    if method == "fit" and _shuffles(original):
        ctx.note("fit(shuffle=True)", SHUFFLE_NOTE)
    if method in ("save_weights", "load_weights"):
        ctx.note(f"model.{method}", CHECKPOINT_NOTE)
    return updated.with_changes(func=cst.Attribute(value=trainer, attr=cst.Name(method)), args=out)


def call_refusal(ctx, sources, call: cst.Call) -> str | None:
    """Why ``call`` (``model.<method>(...)`` on a model from ``sources``) cannot use the trainer, if it cannot:
    ``tern/features/training/compiled_models.py``'s reason, and for a ``fit`` that validates, ``evaluate``'s too."""
    method = call.func.attr.value
    why = refusal(ctx.package.fact(TrainingFacts).models, sources, ctx.package.reaches, method)
    if why is None and method == "fit":
        bound = _bound(call, FIT)
        if not isinstance(bound, Refusal) and {"validation_data", "validation_split"} & set(bound):
            why = refusal(ctx.package.fact(TrainingFacts).models, sources, ctx.package.reaches, "evaluate")
            if why is not None:
                why = f"fit validates with Keras' evaluate after each epoch: {why}"
    return why


def _shuffles(call: cst.Call) -> bool:
    bound = _bound(call, FIT)
    return isinstance(bound, Refusal) or "shuffle" not in bound or code(call.args[bound["shuffle"]].value) != "False"


def _bound(call: cst.Call, params: tuple[str, ...]) -> dict[str, int] | Refusal:
    """Parameter name -> index of its argument in ``call.args``."""
    out = {}
    for i, arg in enumerate(call.args):
        if arg.star:
            return Refusal("*args/**kwargs in the call: its arguments cannot be checked")
        if arg.keyword is not None:
            out[arg.keyword.value] = i
        elif i < len(params):
            out[params[i]] = i
        else:
            return Refusal("more positional arguments than Keras takes")
    return out


def _literal_string(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = ast.literal_eval(node.value)
        return value if isinstance(value, str) else None
    return None


def _value(ctx, kind: str, source: str) -> cst.BaseExpression | Refusal:
    record = ctx.tables.value(kind, source)
    if record is None:
        if kind in ("loss", "metric") and source.lower() in BY_SHAPE:
            return Refusal(f"the {kind} {source!r}: Keras picks binary, categorical or sparse categorical "
                           "crossentropy from the shapes of the labels and predictions; name the one you mean")
        return Refusal(f"the {kind} {source!r} names nothing the tables translate (rules/values/compile.toml)")
    return ctx.target_expr(_SUPPORT.sub(lambda match: match.group(1), record.target))


def _compile_args(ctx, original: cst.Call, args: list[cst.Arg]) -> list[cst.Arg] | Refusal:
    bound = _bound(original, COMPILE)
    if isinstance(bound, Refusal):
        return bound
    for name, at in bound.items():
        before = original.args[at].value
        if name == "optimizer":
            text = _literal_string(before)
            if text is not None:
                value = _value(ctx, "optimizer", text.lower())
                if isinstance(value, Refusal):
                    return value
                args[at] = args[at].with_changes(value=value)
        elif name == "loss":
            if isinstance(before, (cst.Dict, cst.List, cst.Tuple)):
                return Refusal("a loss per output (several model outputs): not translated yet")
            text = _literal_string(before)
            if text is not None:
                value = _value(ctx, "loss", text)
                if isinstance(value, Refusal):
                    return value
                args[at] = args[at].with_changes(value=value)
        elif name in ("metrics", "weighted_metrics"):
            if isinstance(before, cst.Dict):
                return Refusal(f"{name} per output (several model outputs): not translated yet")
            if isinstance(before, (cst.List, cst.Tuple)):
                elements = list(args[at].value.elements)
                for i, element in enumerate(before.elements):
                    if isinstance(element.value, (cst.List, cst.Tuple, cst.Dict)):
                        return Refusal(f"{name} per output (several model outputs): not translated yet")
                    text = _literal_string(element.value)
                    if text is not None:
                        value = _value(ctx, "metric", text)
                        if isinstance(value, Refusal):
                            return value
                        elements[i] = elements[i].with_changes(value=value)
                args[at] = args[at].with_changes(value=args[at].value.with_changes(elements=elements))
        elif name == "loss_weights" and isinstance(before, (cst.Dict, cst.List, cst.Tuple)):
            return Refusal("loss weights per output (several model outputs): not translated yet")
    if "optimizer" not in bound:
        value = _value(ctx, "optimizer", DEFAULT_OPTIMIZER)
        if isinstance(value, Refusal):
            return value
        if args:
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(cst.Arg(value, keyword=cst.Name("optimizer"),
                            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
    return args


def _fit_args(ctx, original: cst.Call, args: list[cst.Arg]) -> list[cst.Arg] | Refusal:
    bound = _bound(original, FIT)
    if isinstance(bound, Refusal):
        return bound
    if "class_weight" in bound and code(original.args[bound["class_weight"]].value) != "None":
        return Refusal("class_weight: not translated yet (pass the per-sample weights as sample_weight)")
    if "callbacks" in bound:
        callbacks = original.args[bound["callbacks"]].value
        if isinstance(callbacks, (cst.List, cst.Tuple)):
            missing = []
            for element in callbacks.elements:
                value = element.value
                name = ctx.resolve(value.func) if isinstance(value, cst.Call) else ctx.resolve(value)
                if name is not None and name.startswith("keras.callbacks."):
                    record = ctx.tables.api.get(name)
                    if record is None or record.todo:
                        missing.append(name.rsplit(".", 1)[-1])
            if missing:
                return Refusal(f"callbacks with no counterpart in the translated fit: {', '.join(missing)} "
                               "(translated: EarlyStopping, ModelCheckpoint, TerminateOnNaN)")
    return args


_SUPPORT = re.compile(r"\{support:(\w+)\}")  # as in the API tables (tern/engine/render.py)
