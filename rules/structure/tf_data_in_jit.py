"""tf.data inside a function that ends up ``@jax.jit``: a TODO, never a silent pass.

tf.data is allowed TF use on the input side only. Under ``jax.jit`` the function is
traced with abstract values, which tf.data cannot take, and a dataset is no JAX type to
pass in. So a tf.data symbol in a function ``tf_function.py`` made a ``jax.jit`` gets a
TODO above the function with the allowance's ``jit_reason`` (the statement itself had
no TODO: outside jit the same use is allowed).
"""

from __future__ import annotations

import libcst as cst

from tern.engine.names import short_name
from tern.engine.results import code
from tern.engine.rule import Rule
from tern.engine.walk import walk


class _Refs(cst.CSTVisitor):
    def __init__(self, ctx):
        self.ctx = ctx
        self.found: list[str] = []

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        name = self.ctx.resolve(node)
        if name is not None:
            self.found.append(name)
        else:
            walk(node.value, self)
        return False

    def visit_Name(self, node: cst.Name) -> None:
        name = self.ctx.resolve(node)
        if name is not None:
            self.found.append(name)


def _jitted(fn: cst.FunctionDef) -> bool:
    return any("jax.jit" in code(d.decorator) for d in fn.decorators)


class TfDataInJitRule(Rule):
    id = "structure:tf-data-in-jit"
    order = 91  # after tf_function.py (and the step rules) decided on jax.jit

    def leave_function(self, ctx, original, updated):
        if not ctx.tables.allowed or not _jitted(updated):
            return None
        refs = _Refs(ctx)
        walk(original.body, refs)
        for name in dict.fromkeys(refs.found):
            record = ctx.tables.allowance(name)
            if record is not None:
                ctx.todo(short_name(name), record.jit_reason)
        return None


RULE = TfDataInJitRule()
