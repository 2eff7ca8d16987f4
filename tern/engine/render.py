"""Apply a table record to a call: bind arguments, map them, build the target expression."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

import libcst as cst

from tern.engine.convert import CONVERTERS, ConvertContext, Refusal
from tern.engine.records import DROP, Signature

# Keyword arguments every Keras layer accepts that only matter to Keras' own bookkeeping.
LAYER_BOOKKEEPING = {"name", "input_shape", "input_dim", "batch_input_shape", "batch_size"}

_PLACEHOLDER = re.compile(r"\{(\w+)\}")
#: template placeholders that ask the context for a PRNG key, and the Flax RNG stream a module draws it
#: from: ``{key}`` for noise and sampling, ``{dropout_key}`` for dropout-like masks (Keras' random_bernoulli,
#: a BaseRandomLayer's generator), the stream a Flax training step already passes (``rngs={"dropout": k}``)
RNG_KEYS = {"key": "noise", "dropout_key": "dropout"}
_TABLE = re.compile(r"\{table:(\w+)\}")
_SUPPORT = re.compile(r"\{support:(\w+)\}")
_SPAN = re.compile(r"\[\[(.*?)\]\]", re.S)


def code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


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


_ATOMIC = (
    cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer, cst.Float,
    cst.SimpleString, cst.ConcatenatedString, cst.Tuple, cst.List, cst.Dict, cst.Set,
    cst.FormattedString, cst.ListComp, cst.DictComp, cst.SetComp, cst.GeneratorExp,
)


def _wrap(node: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(node, _ATOMIC) or node.lpar:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def map_arguments(
    sig: Signature, bound: Bound, ctx: ConvertContext, *, bookkeeping: set[str] = frozenset()
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
    ctx: ConvertContext,
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


def _table_name(ctx, kind: str) -> str:
    from tern.engine.context import value_table_name

    ctx.value_tables.add(kind)
    return value_table_name(kind)


class _Substitute(cst.CSTTransformer):
    """Puts argument code in for placeholders; parenthesizes it only inside operators."""

    def __init__(self, values: dict[str, cst.BaseExpression]):
        self.values = values
        self._bare: set[int] = set()

    def _mark(self, value) -> None:
        if isinstance(value, cst.Name) and value.value in self.values:
            self._bare.add(id(value))

    def visit_Arg(self, node: cst.Arg) -> None:
        self._mark(node.value)

    def visit_Element(self, node) -> None:
        self._mark(node.value)

    def visit_SubscriptElement(self, node: cst.SubscriptElement) -> None:
        if isinstance(node.slice, cst.Index):
            self._mark(node.slice.value)

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self._mark(node.body)

    def leave_Name(self, original, updated):
        if updated.value in self.values:
            value = self.values[updated.value]
            return value if id(original) in self._bare else _wrap(value)
        return updated


_LITERAL_KINDS = ((cst.Integer, "int"), (cst.Float, "float"), (cst.List, "list"), (cst.Tuple, "tuple"))


def _guard_holds(when: dict[str, list[str]], values: dict[str, cst.BaseExpression]) -> bool:
    """Every guarded argument is given and names one of the listed values: its last dotted
    part or string content (``dtype=tf.int32`` and ``dtype="int32"`` both name ``int32``), or
    the kind of literal it is (``int``, ``float``, ``list``, ``tuple``)."""
    for param, names in when.items():
        node = values.get(param)
        if node is None:
            return False
        kinds = {kind for cls, kind in _LITERAL_KINDS if isinstance(node, cls)}
        if code(node).strip("'\"").rsplit(".", 1)[-1] not in names and not kinds & set(names):
            return False
    return True


def expand_template(
    template: str | list[str], values: dict[str, cst.BaseExpression], ctx, defaults: dict[str, str] | None = None,
    *, strict: bool = True, guarded: frozenset[str] = frozenset(),
) -> cst.BaseExpression | Refusal:
    """Fill ``{param}`` placeholders with argument code; ``[[...]]`` spans need all theirs.

    A list of templates is a list of alternatives: the first whose required placeholders
    are all given is used (``tf.scan`` with and without ``initializer``); an alternative
    written as ``{when = {param = [names]}, template = "..."}`` is tried only when that
    argument names one of them (``tf.random.uniform`` with an integer ``dtype``) or is a
    literal of one of the kinds listed (``int``, ``float``, ``list``, ``tuple``). A conditional
    expression whose test came out as a literal ``True``/``False`` is folded. A guarded argument
    is placed by its guard: its value is known, so the alternative may leave it out
    (``band_part(x, -1, 0)`` is ``jnp.tril(x)``).

    Target names in the template are respelled (``jax.numpy`` -> ``jnp``) before the
    user's argument code goes in, so user code is never rewritten by accident.
    """
    if isinstance(template, list):
        refusal = Refusal("no template alternative fits the given arguments")
        for alternative in template:
            guard: frozenset[str] = frozenset()
            if isinstance(alternative, dict):  # {when = {param = [names]}, template = "..."}
                if not _guard_holds(alternative["when"], values):
                    continue
                guard = frozenset(alternative["when"])
                alternative = alternative["template"]
            out = expand_template(alternative, values, ctx, defaults, strict=strict, guarded=guard)
            if not isinstance(out, Refusal):
                return out
            refusal = out
        return refusal
    defaults = defaults or {}
    given = set(values) - guarded
    values = dict(values)
    for name, default in defaults.items():
        if name not in values:
            filled = expand_template(default, values, ctx, strict=False) if "{" in default else ctx.target_expr(default)
            if isinstance(filled, Refusal):
                return filled
            values[name] = filled

    def span(match: re.Match) -> str:
        inner = match.group(1)
        needed = _PLACEHOLDER.findall(inner)
        return inner if all(n in values or n in RNG_KEYS for n in needed) else ""  # {key}: always available

    text = _SPAN.sub(span, template)
    if strict:
        unused = sorted(n for n in given if "{" + n + "}" not in text)
        if unused:  # an argument the translation would silently lose
            return Refusal(f"argument `{unused[0]}` has no place in the translation")
    missing = [n for n in _PLACEHOLDER.findall(text) if n not in values and n not in RNG_KEYS]
    if missing:
        return Refusal(f"required argument `{missing[0]}` not given")
    # only now, for the spans kept and the alternative chosen, ask for tables and support code
    text = _TABLE.sub(lambda mt: _table_name(ctx, mt.group(1)), text)
    text = _SUPPORT.sub(lambda mt: mt.group(1), text)  # imported from the package's support module
    for placeholder, stream in RNG_KEYS.items():
        if "{" + placeholder + "}" in text and placeholder not in values:  # a param named `key` (MHA) is not the PRNG key
            key = ctx.rng_key(stream)
            if isinstance(key, Refusal):
                return key
            values[placeholder] = key
    placeholders = {n: f"__tern_{n}__" for n in _PLACEHOLDER.findall(text)}
    skeleton_text = _PLACEHOLDER.sub(lambda m: placeholders[m.group(1)], text)
    skeleton = ctx.target_expr(skeleton_text)
    filled = skeleton.visit(_Substitute({placeholders[n]: values[n] for n in placeholders}))
    return filled.visit(_FoldLiteralConditions())


class _FoldLiteralConditions(cst.CSTTransformer):
    """``a if True else b`` -> ``a`` (templates branch on arguments that are often literals)."""

    def leave_IfExp(self, original, updated):
        test = updated.test
        if isinstance(test, cst.Name) and test.value in ("True", "False"):
            chosen = updated.body if test.value == "True" else updated.orelse
            if updated.lpar and not chosen.lpar and not isinstance(chosen, _ATOMIC):
                return chosen.with_changes(lpar=updated.lpar, rpar=updated.rpar)
            return chosen
        return updated


def api_call(ctx, record, call: cst.Call) -> cst.BaseExpression | Refusal:
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
    return out if isinstance(out, Refusal) else _wrap(out)
