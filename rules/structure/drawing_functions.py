"""Functions that draw from TF's global random state take a ``key``, and their callers pass one.

``def balanced_sample(positive, negative, n)`` calling ``tf.random.uniform`` draws from
the generator TF keeps for the program; a JAX function draws from the keys it is given.
The package pre-pass finds such functions (``tern/features/random_draws/draws.py``, closed over calls); here each
gains a keyword-only ``key`` parameter, with no default, so a caller that gives none fails
loudly instead of drawing the same numbers every time; its draws take
``jax.random.fold_in(key, i)`` (``FileContext.rng_key``). Every call of one passes a key
from where it stands: a test ``jax.random.key(n)``, a Flax module method ``self.make_rng``,
another drawing function a key folded from its own. Where no key can be had (a loop that
would reuse it, a method of a plain class), the call keeps a TODO.
"""

from __future__ import annotations

import libcst as cst

from tern.engine.results import Refusal
from tern.engine.rule import Rule
from tern.features.random_draws import DrawFacts

KEY = "key"


class DrawingFunctionsRule(Rule):
    id = "structure:drawing-functions"
    scope = "all"
    order = 26

    def visit_function(self, ctx, node):
        if node.name.value in ctx.package.fact(DrawFacts).functions and len(ctx.frames) == 1 and not ctx.frame.in_module_method \
                and not ctx.is_test and ctx.keras_class is None:
            ctx.frame.tags.add("drawing_function")

    def leave_call(self, ctx, original, updated):
        name = original.func.value if isinstance(original.func, cst.Name) else None
        if name is None or name not in ctx.package.fact(DrawFacts).functions or ctx.frame is None:
            return None
        if any(a.keyword is not None and a.keyword.value == KEY for a in updated.args):
            return None
        key = ctx.rng_key()
        if isinstance(key, Refusal):
            ctx.todo(f"{name}(key=...)", f"{name} draws random numbers and takes a `key`: {key.reason}")
            return None
        new = cst.Arg(key, keyword=cst.Name(KEY), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        return updated.with_changes(args=_appended(list(updated.args), new))

    def leave_function(self, ctx, original, updated):
        if "drawing_function" not in ctx.frame.tags:
            return None
        params = updated.params
        if any(p.name.value == KEY for p in params.kwonly_params):
            return None  # translated already
        new = cst.Param(cst.Name(KEY))
        kwonly = list(params.kwonly_params)
        if kwonly:
            kwonly[-1] = kwonly[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        star = params.star_arg
        if star is cst.MaybeSentinel.DEFAULT:
            star = cst.ParamStar(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        plist = list(params.params)
        if plist and isinstance(star, cst.ParamStar):
            plist[-1] = plist[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return updated.with_changes(params=params.with_changes(params=plist, star_arg=star, kwonly_params=[*kwonly, new]))


def _appended(args: list[cst.Arg], new: cst.Arg) -> list[cst.Arg]:
    """``args`` and ``new`` last, laid out as the call was: what stood before the closing
    parenthesis (a line break, a trailing comma) stays before it."""
    if not args:
        return [new]
    last = args[-1]
    space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if isinstance(last.comma, cst.Comma):  # ``f(\n    a,\n)``: ``a, key=k,\n)``
        return [*args[:-1], last.with_changes(comma=space), new.with_changes(comma=last.comma)]
    return [*args[:-1], last.with_changes(comma=space, whitespace_after_arg=cst.SimpleWhitespace("")),
            new.with_changes(whitespace_after_arg=last.whitespace_after_arg)]


RULE = DrawingFunctionsRule()
