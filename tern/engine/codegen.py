"""LibCST's codegen with less Python around each node.

Every node's ``_codegen`` calls two empty hooks around its ``_codegen_impl``, and every
expression's impl enters a generator-based context manager for its parentheses and another
to record positions nobody here reads: for whitespace (two in five of a file's nodes) the
wrapping cost several times the one token. ``emit`` runs each node type's own
``_codegen_impl``, recompiled from LibCST's source once per type with those wrappers
written inline:

* ``child._codegen(state, ...)`` -> the child type's impl, looked up inline;
* ``with self._parenthesize(state):`` -> the ``lpar`` before the body and the ``rpar`` after,
  and likewise ``_bracketize``/``_braceize``: the tokens those context managers add;
* ``with state.record_syntactic_position(...):`` -> the body alone: the states used here
  record no positions (``results._Unrecorded``).

The tokens are LibCST's. An impl written any other way is run as LibCST's own for that
node type (its children then go through LibCST too). Only for states whose
``before_codegen``/``after_codegen`` do nothing and that record no positions.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Callable

import libcst as cst

#: per node type, its impl recompiled (or LibCST's ``_codegen`` where it could not be)
_IMPLS: dict[type, Callable] = {}

_WRAPPERS = {"_parenthesize": ("lpar", "rpar", True), "_bracketize": ("lbracket", "rbracket", False),
             "_braceize": ("lbrace", "rbrace", False)}


def emit(node: cst.CSTNode, state) -> None:
    """``node._codegen(state)``: the same tokens added to ``state``."""
    (_IMPLS.get(node.__class__) or _learn(node.__class__))(node, state)


def _emit_with(node: cst.CSTNode, state, **kwargs) -> None:
    """``node._codegen(state, **kwargs)`` (a parent's defaults for its child: ``default_comma``)."""
    (_IMPLS.get(node.__class__) or _learn(node.__class__))(node, state, **kwargs)


def by_libcst() -> set[type]:
    """The node types met so far whose impl could not be recompiled: LibCST's own runs them."""
    return {kind for kind, impl in _IMPLS.items() if impl is _by_libcst}


class _Unsupported(Exception):
    pass


class _Inline(ast.NodeTransformer):
    def __init__(self, module_globals: dict):
        self.module_globals = module_globals
        self.bases: dict[str, Callable] = {}  # a base class' impl called by name, recompiled too

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "_codegen":
            child = func.value
            if _plain_reference(child):  # read twice: inline ``emit``, one call less per node
                kind = ast.Attribute(child, "__class__", ast.Load())
                impl = ast.BoolOp(ast.Or(), [ast.Call(ast.Attribute(ast.Name("_tern_impls", ast.Load()), "get", ast.Load()), [kind], []),
                                             ast.Call(ast.Name("_tern_learn", ast.Load()), [kind], [])])
                return ast.Call(impl, [child, *node.args], node.keywords)
            emitter = "_emit_with" if node.keywords else "_emit"
            return ast.Call(ast.Name(emitter, ast.Load()), [child, *node.args], node.keywords)
        if (isinstance(func, ast.Attribute) and func.attr == "_codegen_impl" and isinstance(func.value, ast.Name)
                and isinstance(self.module_globals.get(func.value.id), type)):
            compiled = _compiled_function(self.module_globals[func.value.id].__dict__.get("_codegen_impl"))
            if compiled is None:
                raise _Unsupported(ast.unparse(func))
            name = f"_base_{func.value.id}"
            self.bases[name] = compiled
            return ast.Call(ast.Name(name, ast.Load()), node.args, node.keywords)
        if isinstance(func, ast.Attribute) and func.attr in (*_WRAPPERS, "record_syntactic_position", "_codegen_impl"):
            raise _Unsupported(func.attr)  # outside a with statement: not a shape this knows
        return node

    def visit_With(self, node: ast.With) -> list[ast.stmt]:
        before: list[ast.stmt] = []
        after: list[ast.stmt] = []
        for item in node.items:
            call = item.context_expr
            if item.optional_vars is not None or not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
                raise _Unsupported("with")
            owner, name = ast.unparse(call.func.value), call.func.attr
            if name == "record_syntactic_position" and owner == "state":
                continue
            if name not in _WRAPPERS or owner != "self" or ast.unparse(call) != f"self.{name}(state)":
                raise _Unsupported(ast.unparse(call))
            opening, closing, many = _WRAPPERS[name]
            before += [self.visit(s) for s in _codegen_statements(opening, many)]
            after[:0] = [self.visit(s) for s in _codegen_statements(closing, many)]
        body = [s for statement in node.body for s in _as_list(self.visit(statement))]
        return before + body + after


def _plain_reference(node: ast.expr) -> bool:
    """A name or ``a.b.c``: reading it twice reads the same node."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _as_list(result) -> list[ast.stmt]:
    return result if isinstance(result, list) else [result]


def _codegen_statements(field: str, many: bool) -> list[ast.stmt]:
    """What a wrapper's context manager does before or after its body, as LibCST writes it."""
    if many:
        return ast.parse(f"for _part in self.{field}:\n    _part._codegen(state)").body
    return ast.parse(f"self.{field}._codegen(state)").body


_FUNCTIONS: dict[Callable, Callable | None] = {}


def _compiled_function(impl: Callable | None) -> Callable | None:
    """``impl`` (a ``_codegen_impl``) recompiled with its wrappers inline; None if it cannot be."""
    if impl is None:
        return None
    if impl in _FUNCTIONS:
        return _FUNCTIONS[impl]
    _FUNCTIONS[impl] = None  # while compiling: a recursive reference is not inlined
    inline = _Inline(impl.__globals__)
    try:
        source = textwrap.dedent(inspect.getsource(impl))
        function = ast.parse(source).body[0]
        if not isinstance(function, ast.FunctionDef) or function.decorator_list:
            return None
        function.body = [s for statement in function.body for s in _as_list(inline.visit(statement))]
    except (OSError, TypeError, SyntaxError, _Unsupported):
        return None
    function.name = "impl"
    function.returns = None
    for arg in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs):
        arg.annotation = None  # LibCST's annotations name what its module imports for type checkers only
    module = ast.fix_missing_locations(ast.Module([function], type_ignores=[]))
    namespace = dict(impl.__globals__, _emit=emit, _emit_with=_emit_with, _tern_impls=_IMPLS, _tern_learn=_learn, **inline.bases)
    exec(compile(module, f"<tern codegen: {impl.__qualname__}>", "exec"), namespace)  # LibCST's own source, rewritten
    _FUNCTIONS[impl] = namespace["impl"]
    return namespace["impl"]


def _by_libcst(node: cst.CSTNode, state, **kwargs) -> None:
    node._codegen(state, **kwargs)


def _learn(kind: type) -> Callable:
    impl = _compiled_function(kind._codegen_impl) if kind._codegen is cst.CSTNode._codegen else None
    _IMPLS[kind] = impl or _by_libcst
    return _IMPLS[kind]
