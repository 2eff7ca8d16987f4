"""``@tf.function`` to ``@jax.jit`` where that is safe, else removed (eager is equivalent).

``jax.jit`` traces once per static configuration and cannot branch in Python on traced
values, which TF's autograph converts silently. So the decorator becomes ``jax.jit``
only on a plain function whose body has no Python ``if``/``while`` and no ``for`` other
than over ``range(...)`` of a parameter marked static; parameters with literal
int/bool/str defaults are passed as ``static_argnames`` (they select a trace, as Python
values do under ``tf.function``). Methods lose the decorator: Flax modules are
transformed with ``nn.jit`` or jitted at the ``apply`` call, not per method.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.dispatch import CachedHooks
from tern.engine.rule import Rule
from tern.engine.walk import walk
from tern.engine.transform import transform

TF_FUNCTION = "tensorflow.function"


class _Control(cst.CSTVisitor):
    def __init__(self) -> None:
        self.reason: str | None = None

    def visit_If(self, node):
        self.reason = self.reason or "Python `if` (autograph converts it in TF; jit needs lax.cond)"

    def visit_While(self, node):
        self.reason = self.reason or "Python `while` (needs lax.while_loop under jit)"

    def visit_IfExp(self, node):
        self.reason = self.reason or "conditional expression on possibly traced values"

    def visit_For(self, node):
        if not m.matches(node.iter, m.Call(func=m.Name("range"))):
            self.reason = self.reason or "Python `for` over a tensor"

    def visit_FunctionDef(self, node):
        return False


class _GraphConds(CachedHooks):
    """A graph function traces both branches of ``tf.cond`` in TF as well: ``jax.lax.cond``
    says so directly (``eager_cond`` is for eager code, where TF runs one branch)."""

    def __init__(self, ctx):
        self.ctx = ctx

    def leave_Call(self, original, updated):
        if m.matches(updated.func, m.Name("eager_cond")) and len(updated.args) == 3:
            return updated.with_changes(func=self.ctx.target_expr("jax.lax.cond"))
        return updated


def _static(params: cst.Parameters) -> list[str]:
    out = []
    for p in (*params.params, *params.kwonly_params):
        if isinstance(p.default, (cst.Integer, cst.SimpleString)) or m.matches(p.default, m.Name("True") | m.Name("False")):
            out.append(p.name.value)
    return out


class TfFunctionRule(Rule):
    id = "structure:tf-function"
    consumes = frozenset({TF_FUNCTION})
    order = 40

    def leave_function(self, ctx, original, updated):
        decorators = list(updated.decorators)
        hits = [
            i for i, d in enumerate(original.decorators)
            if ctx.resolve(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) == TF_FUNCTION
        ]
        if not hits:
            return None
        i = hits[0]
        in_class = ctx.frame is not None and ctx.frame.in_module_method
        updated = transform(updated, _GraphConds(ctx))
        control = _Control()
        walk(updated.body, control)
        if in_class or control.reason:
            del decorators[i]
            return updated.with_changes(decorators=decorators)
        static = _static(updated.params)
        if static:
            names = ", ".join(f'"{n}"' for n in static) + ("," if len(static) == 1 else "")
            expr = ctx.target_expr(f"functools.partial(jax.jit, static_argnames=({names}))")
        else:
            expr = ctx.target_name("jax.jit")
        decorators[i] = decorators[i].with_changes(decorator=expr)
        return updated.with_changes(decorators=decorators)


RULE = TfFunctionRule()
