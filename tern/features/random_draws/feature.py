"""Which package functions draw (``draws.py``), and the key of each draw in them."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import libcst as cst

from tern.engine.features import Feature
from tern.engine.package import close_over_calls
from tern.engine.results import Refusal
from tern.features.random_draws.draws import draws_directly, key_is_free
from tern.features.tf_data.datasets import Resolver


@dataclass
class DrawFacts:
    #: top-level functions of non-test modules that draw from TF's global random state, directly or
    #: through another: they take a ``key``, and callers pass one
    functions: set[str] = field(default_factory=set)


class RandomDraws(Feature):
    facts = DrawFacts
    order = 20

    def scan(self, info, tree: ast.Module, module: str, is_test: bool, source: str) -> None:
        if is_test:
            return
        resolve = Resolver(tree)
        facts = info.fact(DrawFacts)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and draws_directly(node, resolve):
                facts.functions.add(node.name)

    def close(self, info) -> None:
        facts = info.fact(DrawFacts)
        if not facts.functions:
            return  # no function draws: none calls one that does
        plain = {fn.name for fn in info.functions if key_is_free(fn)} - info.claimed_functions() \
            - info.factories - info.model_builders - info.training_helpers  # those get keys their own way, or are modules
        facts.functions = close_over_calls(facts.functions & plain, info.calls, plain)

    def draw_key(self, ctx, frame) -> cst.BaseExpression | Refusal | None:
        """The i-th draw of a function that takes a ``key``: ``jax.random.fold_in(key, i)``, a
        different key per draw site; a refusal where one site would draw again and again with
        the same key."""
        if frame.name not in ctx.package.fact(DrawFacts).functions:
            return None
        if frame.repeated or frame.loops:
            return Refusal("a draw inside a loop, lambda or comprehension would take the same key every time; "
                           "split the function's key (jax.random.split) and give each iteration its own")
        site = frame.draws
        frame.draws += 1
        return ctx.target_expr(f"jax.random.fold_in(key, {site})")


FEATURE = RandomDraws()
