"""Apply a table record to a call: bind arguments, map them, build the target expression."""

from __future__ import annotations

import ast
from dataclasses import dataclass

import libcst as cst

from tern.engine.convert import CONVERTERS
from tern.engine.records import DROP, ApiRecord, Signature
from tern.engine.results import Refusal, code
from tern.engine.templates import RenderContext, expand_template, wrap

# Keyword arguments every Keras layer accepts that only matter to Keras' own bookkeeping.
LAYER_BOOKKEEPING = {"name", "input_shape", "input_dim", "batch_input_shape", "batch_size"}



@dataclass(frozen=True)
class Bound:
    """A call's arguments by source parameter name (positional ones remembered).

    A ``*name`` parameter collects the remaining positional arguments, in order, into
    ``variadic``; they are emitted positionally.
    """

    args: dict[str, cst.BaseExpression]
    positional: tuple[str, ...]
    variadic: tuple[cst.BaseExpression, ...] = ()


def bind(call: cst.Call, params: tuple[str, ...], extra_ok: set[str] = frozenset()) -> Bound | Refusal:
    args: dict[str, cst.BaseExpression] = {}
    positional: list[str] = []
    variadic: list[cst.BaseExpression] = []
    star_at = next((i for i, p in enumerate(params) if p.startswith("*")), None)
    for i, arg in enumerate(call.args):
        if arg.star:
            return Refusal(f"`{arg.star}` arguments cannot be mapped statically")
        if arg.keyword is None:
            if star_at is not None and i >= star_at:
                variadic.append(arg.value)
                continue
            if i >= len(params):
                return Refusal(f"more positional arguments than the known signature ({len(params)})")
            args[params[i]] = arg.value
            positional.append(params[i])
        else:
            name = arg.keyword.value
            if name not in params and name not in extra_ok:
                return Refusal(f"unknown argument `{name}`")
            args[name] = arg.value
    return Bound(args, tuple(positional), tuple(variadic))


def _is_none(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def _is_inert(node: cst.BaseExpression, values: tuple[str, ...]) -> bool:
    """The argument is literally one of the record's "not used" values (bools never equal numbers)."""
    if not isinstance(node, (cst.Name, cst.Integer, cst.Float, cst.SimpleString, cst.UnaryOperation)):
        return False
    try:
        given = ast.literal_eval(code(node))
    except (ValueError, SyntaxError):
        return False
    for text in values:
        inert = ast.literal_eval(text)
        if isinstance(given, bool) == isinstance(inert, bool) and given == inert:
            return True
    return False


def map_arguments(
    sig: Signature, bound: Bound, ctx: RenderContext, *, bookkeeping: set[str] = frozenset()
) -> dict[str, cst.BaseExpression] | Refusal:
    """Source args -> converted values keyed by *source* param (dropped ones removed)."""
    out: dict[str, cst.BaseExpression] = {}
    for name, value in bound.args.items():
        if name in bookkeeping and name not in sig.params:
            continue
        if name in sig.inert and _is_inert(value, sig.inert[name]):
            continue  # the source's own "not used" value: as if not passed
        if name in sig.unsupported:
            if _is_none(value):
                continue  # passing None is passing nothing
            return Refusal(f"`{name}` is not supported: {sig.unsupported[name]}")
        if sig.rename.get(name) == DROP:
            continue
        if _is_none(value) and (sig.rename.get(name, name) in sig.defaults or name in sig.defaults):
            continue  # TF's None means its default, which the record writes out
        converter = sig.convert.get(name)
        if converter is not None:
            converted = CONVERTERS[converter](value, ctx)
            if isinstance(converted, Refusal):
                return Refusal(f"`{name}`: {converted.reason}")
            if converted is None:
                continue
            value = converted
        out[name] = value
    return out


def build_call(
    target: cst.BaseExpression, sig: Signature, bound: Bound, mapped: dict[str, cst.BaseExpression],
    ctx: RenderContext,
) -> cst.Call:
    """A target call: the leading ``positional`` params positionally while all of them up to
    there are present (however the source passed them: some targets are positional-only),
    the rest as keywords."""
    args: list[cst.Arg] = []
    for name in sig.params[: sig.positional]:
        if name.startswith("*") or name not in mapped:
            break
        args.append(cst.Arg(mapped[name]))
    if bound.variadic:
        # variadic arguments follow the params before them, which were positional too
        args.extend(cst.Arg(v) for v in bound.variadic)
    given_targets = set()
    for name in sig.params + tuple(k for k in mapped if k not in sig.params):
        if name.startswith("*") or name not in mapped:
            continue
        if any(a.value is mapped[name] for a in args):
            continue
        keyword = sig.rename.get(name, name)
        given_targets.add(keyword)
        args.append(cst.Arg(mapped[name], keyword=cst.Name(keyword)))
    for keyword, value in sig.defaults.items():
        if keyword in given_targets or _target_bound_positionally(sig, keyword, mapped):
            continue
        args.append(cst.Arg(ctx.target_expr(value), keyword=cst.Name(keyword)))
    return cst.Call(func=target, args=commas(args))


def _target_bound_positionally(sig: Signature, keyword: str, mapped) -> bool:
    for name in sig.params[: sig.positional]:
        if sig.rename.get(name, name) == keyword and name in mapped:
            return True
    return False


def commas(args: list[cst.Arg]) -> list[cst.Arg]:
    out = []
    for i, arg in enumerate(args):
        if i < len(args) - 1:
            arg = arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        else:
            arg = arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)
        if arg.keyword is not None:
            arg = arg.with_changes(
                equal=cst.AssignEqual(
                    whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
                )
            )
        out.append(arg)
    return out


def api_call(ctx: RenderContext, record: ApiRecord, call: cst.Call) -> cst.BaseExpression | Refusal:
    """The translation of ``call`` (its arguments already translated) by an ``[[api]]`` record
    with a target or template, parenthesized when it is not atomic (``a * b + c``); used by the
    engine for names it resolves and by rules for calls only they recognize (a BaseRandomLayer's
    ``self._random_generator.random_uniform(...)``)."""
    bound = bind(call, record.signature.params)
    if isinstance(bound, Refusal):
        return bound
    mapped = map_arguments(record.signature, bound, ctx)
    if isinstance(mapped, Refusal):
        return mapped
    if record.template is not None:
        out = expand_template(record.template, mapped, ctx, record.signature.defaults)
    else:
        out = build_call(ctx.target_name(record.target), record.signature, bound, mapped, ctx)
    return out if isinstance(out, Refusal) else wrap(out)
