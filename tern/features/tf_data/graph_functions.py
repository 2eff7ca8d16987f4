"""Functions tf.data runs in its TF graph stay TF: find them during the rewrite, check them.

``ds.map(lambda x, y: (tf.cast(x, tf.float32) / 255, y))`` hands the lambda to tf.data,
which traces it into a graph of TF ops: translated to ``jnp`` it would fail there. So the
function arguments of a dataset's graph methods (``rules/allowed/tf_data.toml``
``graph_methods``), and the module-level functions passed there by name (with those they
call), are left exactly as written. Inside, TF ops are allowed TF use; Keras (not
importable next to JAX) and anything else TF-rooted gets a TODO saying why.
"""

from __future__ import annotations

import libcst as cst

from tern.features.tf_data.datasets import MODULE_SCOPE, FileDatasets, parse_expression
from tern.engine.names import short_name
from tern.engine.results import code
from tern.engine.walk import walk


def _scope(ctx) -> str:
    return ctx.frame.name if ctx.frame is not None else MODULE_SCOPE


def graph_arguments(ctx, call: cst.Call) -> list[cst.BaseExpression]:
    """The arguments of ``call`` that tf.data traces into its graph ([] for most calls)."""
    facts = ctx.file_fact(FileDatasets)
    func = call.func
    if facts is None or not isinstance(func, cst.Attribute) or func.attr.value not in facts.record.graph_methods:
        return []
    receiver = parse_expression(code(func.value))
    if receiver is None or not facts.is_dataset(receiver, _scope(ctx)):
        return []
    out = []
    positional = [a for a in call.args if a.keyword is None]
    starred = any(a.star for a in positional)
    for position, name in facts.record.graph_params(func.attr.value):
        if not starred and position < len(positional):
            out.append(positional[position].value)
        out += [a.value for a in call.args if a.keyword is not None and a.keyword.value == name]
    return out


def is_graph_function(ctx, node: cst.FunctionDef) -> bool:
    """A module-level function tf.data runs in its graph (passed to ``ds.map`` by name, or
    called from one that is)."""
    facts = ctx.file_fact(FileDatasets)
    return facts is not None and not ctx.frames and not ctx.classes and node.name.value in facts.graph_functions


class _Names(cst.CSTVisitor):
    """Canonical TF/Keras names referenced anywhere in a region, scopes pushed as it goes
    (which also keeps the file's scope queue in step: the rewrite never enters the region)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.found: list[str] = []

    def _push(self, node) -> None:
        self.ctx.scopes.push_function(node)

    def _pop(self, node) -> None:
        self.ctx.scopes.pop()

    visit_FunctionDef = visit_Lambda = _push
    leave_FunctionDef = leave_Lambda = _pop

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        name = self.ctx.resolve(node)
        if name is not None:
            self.found.append(name)
        else:
            walk(node.value, self)  # ``attr`` is a member name, never a reference
        return False

    def visit_Name(self, node: cst.Name) -> None:
        name = self.ctx.resolve(node)
        if name is not None:
            self.found.append(name)

    def visit_Arg(self, node: cst.Arg) -> bool:
        walk(node.value, self)  # a keyword is not a reference
        return False

    def visit_Param(self, node: cst.Param) -> bool:
        if node.default is not None:
            walk(node.default, self)
        return False

    def visit_Import(self, node) -> bool:
        return False

    visit_ImportFrom = visit_Import


def check(ctx, node: cst.FunctionDef | cst.Lambda) -> None:
    """TODOs for what may not stay in a graph function (everything else stays as written)."""
    record = ctx.file_fact(FileDatasets).record
    names = _Names(ctx)
    if isinstance(node, cst.FunctionDef):
        for decorator in node.decorators:
            walk(decorator, names)
        node = node.with_changes(decorators=[])
    walk(node, names)
    for name in dict.fromkeys(names.found):
        if not record.allowed_in_graph(name):
            ctx.todo(short_name(name), record.graph_reason)
