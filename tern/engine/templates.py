"""Fill a table record's template with a call's argument code.

Templates are the target side of ``[[api]]`` and layer records (``rules/api``,
``rules/layers``): ``{param}`` placeholders, ``[[...]]`` spans kept only when all their
placeholders are given, ``{table:kind}`` for a value table, ``{support:Name}`` for a
support definition, and ``{key}``/``{dropout_key}`` for a PRNG key the context supplies.
"""

from __future__ import annotations

import re
from typing import Protocol

import libcst as cst
import libcst.matchers as m

from tern.engine.dispatch import CachedHooks
from tern.engine.records import Tables
from tern.engine.results import Refusal, code, value_table_name
from tern.engine.walk import findall
from tern.engine.transform import transform


class RenderContext(Protocol):
    """What rendering a record asks of the file being translated: the one interface
    ``templates``, ``convert`` and ``render`` take (``FileContext`` is the one implementation),
    so none of them imports the context or calls back into more of it than this."""

    tables: Tables
    #: value kinds looked up at run time; rendering a ``{table:kind}`` adds the kind
    value_tables: set[str]
    #: module-level names bound to a literal Keras config dict (``initializer=CONFIG``)
    keras_configs: dict[str, dict]

    def resolve(self, node: cst.BaseExpression) -> str | None: ...
    def target_expr(self, text: str) -> cst.BaseExpression: ...
    def target_name(self, dotted: str) -> cst.BaseExpression: ...
    def value_target(self, kind: str, source: str) -> str | None: ...
    def value_lookup(self, kind: str, node: cst.BaseExpression) -> cst.BaseExpression: ...
    def dtype_source(self, source: str) -> str: ...
    def api_todo(self, record) -> str: ...
    def rng_key(self, stream: str = ...) -> cst.BaseExpression | Refusal: ...

_PLACEHOLDER = re.compile(r"\{(\w+)\}")
#: template placeholders that ask the context for a PRNG key, and the Flax RNG stream a module draws it
#: from: ``{key}`` for noise and sampling, ``{dropout_key}`` for dropout-like masks (Keras' random_bernoulli,
#: a BaseRandomLayer's generator), the stream a Flax training step already passes (``rngs={"dropout": k}``)
RNG_KEYS = {"key": "noise", "dropout_key": "dropout"}
_TABLE = re.compile(r"\{table:(\w+)\}")
_SUPPORT = re.compile(r"\{support:(\w+)\}")
_SPAN = re.compile(r"\[\[(.*?)\]\]", re.S)


ATOMIC = (
    cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer, cst.Float,
    cst.SimpleString, cst.ConcatenatedString, cst.Tuple, cst.List, cst.Dict, cst.Set,
    cst.FormattedString, cst.ListComp, cst.DictComp, cst.SetComp, cst.GeneratorExp,
)


def wrap(node: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(node, ATOMIC) or node.lpar:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _table_name(ctx: RenderContext, kind: str) -> str:
    ctx.value_tables.add(kind)
    return value_table_name(kind)


class _Substitute(CachedHooks):
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
            return value if id(original) in self._bare else wrap(value)
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
    template: str | list[str], values: dict[str, cst.BaseExpression], ctx: RenderContext, defaults: dict[str, str] | None = None,
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
    filled = transform(skeleton, _Substitute({placeholders[n]: values[n] for n in placeholders}))
    if not _has_conditional(skeleton) and not any(_has_conditional(values[n]) for n in placeholders):
        return filled  # nothing to fold: the fold's rebuild of the whole expression is saved
    return transform(filled, _FoldLiteralConditions())


def _has_conditional(node: cst.CSTNode) -> bool:
    """Whether ``a if b else c`` occurs in ``node`` (the filled template's come from its skeleton
    and its values)."""
    return bool(findall(node, m.IfExp()))


class _FoldLiteralConditions(CachedHooks):
    """``a if True else b`` -> ``a`` (templates branch on arguments that are often literals)."""

    def leave_IfExp(self, original, updated):
        test = updated.test
        if isinstance(test, cst.Name) and test.value in ("True", "False"):
            chosen = updated.body if test.value == "True" else updated.orelse
            if updated.lpar and not chosen.lpar and not isinstance(chosen, ATOMIC):
                return chosen.with_changes(lpar=updated.lpar, rpar=updated.rpar)
            return chosen
        return updated
