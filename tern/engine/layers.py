"""Keras layer constructors and calls to ``flax.linen``, driven by ``[[layer]]`` records."""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from tern.engine import regularizers
from tern.engine.results import Refusal
from tern.engine.records import DROP, LayerRecord
from tern.engine.render import LAYER_BOOKKEEPING, Bound, bind, build_call, map_arguments
from tern.engine.results import code
from tern.engine.templates import expand_template
from tern.engine.walk import findall


@dataclass(frozen=True)
class Stateless:
    """A parameter-free layer: its ``apply`` template and mapped constructor values."""

    record: LayerRecord
    values: dict[str, cst.BaseExpression]


def construct(ctx, record: LayerRecord, call: cst.Call, masked: bool = False) -> cst.BaseExpression | Stateless | Refusal:
    """The Flax form of ``keras.layers.X(...)``: a module expression, or a Stateless.

    In a functional model's graph (a compact ``__call__``) the layer keeps its Keras
    ``name=`` as its Flax name, so ``model.get_layer(name)`` finds it in the variables tree;
    elsewhere (``setup``, ``nn.Sequential`` items) Flax names submodules by attribute.
    """
    bound = bind(call, record.signature.params, extra_ok=LAYER_BOOKKEEPING | {"trainable", "dtype"})
    if isinstance(bound, Refusal):
        return bound
    name = bound.args.get("name")
    frame = getattr(ctx, "frame", None)
    if name is None or m.matches(name, m.Name("None")) or frame is None or "functional" not in frame.tags:
        name = None
    return _construct(ctx, record, bound, name, masked)


def _named(module: cst.BaseExpression, name: cst.BaseExpression | None) -> cst.BaseExpression:
    """``module`` given ``name=``: the module holding the layer's variables, not a wrapper around it (a
    module built inside a compact method is bound there, so its variables sit under its own name)."""
    if name is None:
        return module
    args = list(module.args)
    if args:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.append(cst.Arg(name, keyword=cst.Name("name"), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
    return module.with_changes(args=args)


#: ``dtype=`` values that are Keras' default float32 policy, which every translated module computes in:
#: the parent layer's own ``self.dtype`` / ``self.compute_dtype`` (libraries hand it to their sublayers)
DEFAULT_DTYPES = frozenset({
    "None", '"float32"', "'float32'", "jnp.float32", "jax.numpy.float32",
    "self.dtype", "self.compute_dtype", "self.variable_dtype", "self._dtype",
})


def _construct(ctx, record: LayerRecord, bound: Bound, flax_name: cst.BaseExpression | None, masked: bool = False) -> cst.BaseExpression | Stateless | Refusal:
    if "dtype" in bound.args and "dtype" not in record.signature.params and code(bound.args["dtype"]) in DEFAULT_DTYPES:
        bound = Bound({k: v for k, v in bound.args.items() if k != "dtype"}, bound.positional)  # float32, as without it
    if m.matches(bound.args.get("trainable"), m.Name("True")):
        bound = Bound({k: v for k, v in bound.args.items() if k != "trainable"}, bound.positional)
    for name in ("trainable", "dtype"):
        if name in bound.args and name not in record.signature.params:
            return Refusal(f"`{name}=` on a layer has no flax.linen constructor counterpart here"
                           + (": translated modules compute in float32, Keras' default policy" if name == "dtype" else ""))
    separated = regularizers.split(ctx, record, bound)
    if isinstance(separated, Refusal):
        return separated
    bound, regularization = separated
    activation = None
    if record.activation and record.activation in bound.args:
        act_bound = Bound({record.activation: bound.args[record.activation]}, ())
        mapped_act = map_arguments(record.signature, act_bound, ctx)
        if isinstance(mapped_act, Refusal):
            return mapped_act
        activation = mapped_act.get(record.activation)
        bound = Bound({k: v for k, v in bound.args.items() if k != record.activation}, bound.positional)
    mapped = map_arguments(record.signature, bound, ctx, bookkeeping=LAYER_BOOKKEEPING)
    if isinstance(mapped, Refusal):
        return mapped
    if record.apply is not None:
        values = {k: v for k, v in mapped.items()}
        return Stateless(record, values)
    if record.output_unless:
        mapped = {k: v for k, v in mapped.items() if k != record.output_unless}  # it chose the output
    template = record.masked_template if masked and record.masked_template else record.template
    if template is not None:
        for name, value in mapped.items():
            if m.matches(value, m.Call(func=m.Attribute(attr=m.Name("Sequential")))):
                return Refusal(
                    f"`{name}` is a layer with a fused activation or a last-step output (an nn.Sequential); "
                    "it cannot be nested here: write the wrapped module by hand"
                )
        module = expand_template(template, mapped, ctx, record.signature.defaults)
        if isinstance(module, Refusal):
            return module
    else:
        module = build_call(ctx.target_name(record.target), record.signature, bound, mapped, ctx)
        module = _named(module, flax_name)  # a template may build its submodules inline: those stay auto-named
    if regularization:
        if record.output_template is not None:
            return Refusal("regularizers of a layer whose output is post-processed (a last step) are not recorded yet")
        return regularizers.wrap(ctx, module, activation, regularization)
    then = [activation] if activation is not None else []
    if record.output_template is not None:
        unless = bound.args.get(record.output_unless) if record.output_unless else None
        if unless is None or m.matches(unless, m.Name("False")):
            body = expand_template(record.output_template, {"outputs": cst.Name("outputs")}, ctx)
            if isinstance(body, Refusal):
                return body
            then.insert(0, cst.Lambda(params=cst.Parameters([cst.Param(cst.Name("outputs"))]), body=body))
        elif not m.matches(unless, m.Name("True")):
            return Refusal(f"`{record.output_unless}` must be a literal True/False to choose the output")
    if not then:
        return module
    elements = [module, *then]
    return cst.Call(
        func=ctx.target_name("flax.linen.Sequential"),
        args=[cst.Arg(cst.List([
            cst.Element(e, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if i < len(elements) - 1 else cst.MaybeSentinel.DEFAULT)
            for i, e in enumerate(elements)
        ]))],
    )


def apply_stateless(ctx, layer: Stateless, inputs: cst.BaseExpression) -> cst.BaseExpression | Refusal:
    values = dict(layer.values)
    values["inputs"] = inputs
    return expand_template(layer.record.apply, values, ctx, layer.record.signature.defaults)


def stateless_lambda(ctx, layer: Stateless) -> cst.BaseExpression | Refusal:
    """The layer as a function of its input: ``lambda inputs: <apply>``, or the function itself
    when the apply only calls one on the input (``Lambda(fn)``, ``Activation("relu")``)."""
    body = apply_stateless(ctx, layer, cst.Name("inputs"))
    if isinstance(body, Refusal):
        return body
    if (
        isinstance(body, cst.Call) and len(body.args) == 1 and body.args[0].keyword is None and not body.args[0].star
        and m.matches(body.args[0].value, m.Name("inputs")) and not findall(body.func, m.Name("inputs"))
    ):
        return body.func
    return cst.Lambda(
        params=cst.Parameters(params=[cst.Param(cst.Name("inputs"))]),
        body=body,
    )


def call_arguments(
    ctx, record: LayerRecord, call: cst.Call, training: str | None, masked: bool = False
) -> list[cst.Arg] | Refusal:
    """Map a layer call's arguments (``training``, ``mask``...) to the Flax call; ``masked``: the
    module was built from ``masked_template``, so ``mask=`` passes on."""
    params = record.call_params
    bound = bind(call, params)
    if isinstance(bound, Refusal):
        return bound
    for name, template in record.call_defaults.items():
        if name not in bound.args:
            repeated = [p for p in re.findall(r"\{(\w+)\}", template) if isinstance(bound.args.get(p), cst.Call)]
            if repeated:  # ``key`` defaults to ``value``: a call written twice would run twice
                return Refusal(f"`{name}` defaults to `{repeated[0]}`, here a call that the Flax form would repeat: "
                               f"bind it to a name first and pass that")
            value = expand_template(template, bound.args, ctx, strict=False)
            if isinstance(value, Refusal):
                return value
            bound = Bound({**bound.args, name: value}, bound.positional)
    args: list[cst.Arg] = []
    for i, name in enumerate(params):
        if name not in bound.args:
            continue
        value = bound.args[name]
        if m.matches(value, m.Name("None")) and name != "training":
            continue  # passing None is passing nothing
        if name == "mask" and masked and record.masked_template:
            args.append(cst.Arg(value, keyword=cst.Name("mask")))
            continue
        if name in record.call_unsupported:
            return Refusal(f"call argument `{name}`: {record.call_unsupported[name]}")
        template = record.call.get(name)
        if template is None:
            if name in bound.positional and all(p in bound.positional for p in params[:i]):
                args.append(cst.Arg(value))
            else:
                args.append(cst.Arg(value, keyword=cst.Name(name)))
            continue
        if template == DROP:
            continue
        rendered = _call_kwarg(ctx, template, {name: value})
        if isinstance(rendered, Refusal):
            return rendered
        args.append(rendered)
    if "training" not in bound.args and record.call.get("training", DROP) != DROP:
        flag = cst.Name(training) if training else cst.Name("False")
        rendered = _call_kwarg(ctx, record.call["training"], {"training": flag})
        if isinstance(rendered, Refusal):
            return rendered
        args.append(rendered)
    return args


def _call_kwarg(ctx, template: str, values: dict[str, cst.BaseExpression]) -> cst.Arg | Refusal:
    keyword, _, expr = template.partition("=")
    if not expr:
        return Refusal(f"call mapping `{template}` is not `keyword=template`")
    value = expand_template(expr.strip(), values, ctx)
    if isinstance(value, Refusal):
        return value
    value = _simplify_not(value)
    return cst.Arg(value, keyword=cst.Name(keyword.strip()))


def _simplify_not(node: cst.BaseExpression) -> cst.BaseExpression:
    """``not True`` -> ``False``; ``not None`` (Keras' unset training) -> ``True``."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
        inner = node.expression
        if isinstance(inner, cst.Name) and inner.value in ("True", "False", "None"):
            return cst.Name("False" if inner.value == "True" else "True")
    return node
