"""A test's ``tf.random.Generator``: its draws take fresh keys, and the generator goes.

Tests make inputs with a generator object (``rng = tf.random.Generator.from_seed(1)`` in a
TestCase's class body or a test, then ``self.rng.uniform(shape=...)``). The engine translates
names it resolves through imports; a generator is a value, so this rule finds the names
bound to one and translates their draws with the ``tensorflow.random.Generator.<method>``
records of ``rules/api/random.toml`` (a fresh ``jax.random.key(n)`` per draw, as for
``tf.random.uniform`` in tests). The binding is dropped only when every use of the name is
such a draw; otherwise everything stays, with the engine's TODOs.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.nodes import assigns_a_call_to_a_name
from tern.engine.render import api_call
from tern.engine.results import Refusal
from tern.engine.rule import Rule
from tern.engine.walk import findall

SOURCE = "tensorflow.random.Generator"
MAKERS = frozenset({f"{SOURCE}.from_seed", f"{SOURCE}.from_non_deterministic_state", SOURCE,
                    "tensorflow.random.get_global_generator"})
MAKER_WORDS = tuple(sorted({name.rsplit(".", 1)[-1] for name in MAKERS}))
STATE = "random_generators"


def _bindings(ctx, stmts) -> dict[str, cst.SimpleStatementLine]:
    """``name = <generator>`` statements among ``stmts``, by name."""
    out = {}
    if not ctx.mentions(*MAKER_WORDS):
        return out  # nothing in the file can resolve to a maker
    for stmt in stmts:
        if assigns_a_call_to_a_name(stmt):
            assign = stmt.body[0]
            if ctx.resolve(assign.value.func) in MAKERS:
                out[assign.targets[0].target.value] = stmt
    return out


def _uses(node: cst.CSTNode, ref: m.BaseMatcherNode) -> tuple[list[cst.Call], int]:
    """Draw calls on ``ref`` (``ref.uniform(...)``) and the number of all references to it."""
    draws = [c for c in findall(node, m.Call(func=m.Attribute(value=ref, attr=m.Name())))]
    return draws, len(findall(node, ref))


class RandomGeneratorsRule(Rule):
    id = "testing:random-generators"
    scope = "tests"
    order = 40

    def _state(self, ctx) -> dict:
        return ctx.rule_state.setdefault(STATE, {"calls": {}, "dropped": set()})

    def _adopt(self, ctx, body: cst.CSTNode, bindings: dict, ref, own: int) -> None:
        """Take over the generators whose every reference (but ``own``, the binding's) is a draw."""
        state = self._state(ctx)
        for name, stmt in bindings.items():
            draws, refs = _uses(body, ref(name))
            if len(draws) == refs - own and all(ctx.tables.api.get(f"{SOURCE}.{c.func.attr.value}") for c in draws):
                state["dropped"].add(id(stmt))
                state["calls"].update({id(c): f"{SOURCE}.{c.func.attr.value}" for c in draws})

    def visit_class(self, ctx, node):
        bindings = _bindings(ctx, node.body.body)
        if bindings:  # a class attribute, drawn from as self.<name>
            self._adopt(ctx, node, bindings, lambda name: m.Attribute(value=m.Name("self"), attr=m.Name(name)), 0)

    def visit_function(self, ctx, node):
        bindings = _bindings(ctx, node.body.body) if isinstance(node.body, cst.IndentedBlock) else {}
        if bindings:  # a local: the binding's own Name is one reference
            self._adopt(ctx, node.body, bindings, lambda name: m.Name(name), 1)

    def leave_call(self, ctx, original, updated):
        source = self._state(ctx)["calls"].get(id(original))
        if source is None:
            return None
        out = api_call(ctx, ctx.tables.api[source], updated)
        if isinstance(out, Refusal):
            ctx.todo(source.replace("tensorflow.", "tf."), out.reason)
            return None
        return out

    def leave_statement(self, ctx, original, updated):
        if id(original) in self._state(ctx)["dropped"]:
            return cst.RemovalSentinel.REMOVE
        return None


RULE = RandomGeneratorsRule()
