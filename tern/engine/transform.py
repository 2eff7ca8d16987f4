"""A transformer pass that rebuilds only the nodes whose children changed.

``node.visit(transformer)`` rebuilds every node of the tree, changed or not: a new node per
node, each validated again, and two ABC ``isinstance`` checks per node. On the engine's main
pass most of a file's nodes (whitespace, punctuation, names no rule touches) come back
unchanged, so that rebuilding was a tenth of the engine's time. ``transform`` calls the same
hooks in the same order as LibCST's visit and builds each node's updated version from
LibCST's own field list (read from ``_visit_and_replace_children``, as ``walk`` does), but
keeps a node whose children all came back as they were: hooks then see ``updated is
original`` where LibCST would have handed them an equal copy.

Only for ``CachedHooks`` transformers, which call no per-field hooks. Node types whose
``_visit_and_replace_children`` does more than pass each field to LibCST's helpers (f-string
parts, ``ImportFrom``) are rebuilt by LibCST itself, hooks and all, below them.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Callable

import libcst as cst

from tern.engine.dispatch import CachedHooks

_REMOVE = cst.RemovalSentinel.REMOVE
_DEFAULT = cst.MaybeSentinel.DEFAULT
_Flatten = cst.FlattenSentinel

#: per node type: ``rebuild(node, visit, transformer)`` -> the node with its children visited
_REBUILD: dict[type, Callable] = {}
#: result types ``on_leave`` may return (LibCST's check, once per type)
_RESULTS: set[type] = set()


def transform(root: cst.CSTNode, transformer: CachedHooks) -> cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel:
    """``root.visit(transformer)``, rebuilding only what changed."""
    if not isinstance(transformer, CachedHooks):
        raise TypeError("transform() takes a CachedHooks transformer (one that calls no per-field hooks)")
    if type(transformer).on_visit is not CachedHooks.on_visit or type(transformer).on_leave is not CachedHooks.on_leave:
        raise TypeError("transform() calls the hooks itself: a CachedHooks transformer overrides no on_visit or on_leave")
    # ``on_visit`` and ``on_leave`` written inline: a call less each, for every node of the tree
    table, hooks_of, rebuilds, results = transformer.hook_table(), transformer.hooks_of, _REBUILD, _RESULTS

    def visit(node):
        kind = node.__class__
        enter, leave = table.get(kind) or hooks_of(kind)
        if enter is None or enter(transformer, node) is not False:
            updated = (rebuilds.get(kind) or _learn(kind))(node, visit, transformer)
        else:
            updated = node
        if leave is None:
            return updated
        result = leave(transformer, node, updated)
        if result.__class__ not in results:
            _check_result(result)
        return result

    result = visit(root)
    if isinstance(root, cst.Module) and result is _REMOVE:  # as Module.visit answers a removal
        return root.with_changes(body=(), header=(), footer=())
    return result


def _check_result(result) -> None:
    if not isinstance(result, (cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel)):
        raise cst.CSTValidationError(
            f"Expected a node of type CSTNode or a RemovalSentinel, but got a return value of {type(result).__name__}")
    _RESULTS.add(result.__class__)


# -- LibCST's field helpers (libcst/_nodes/internal.py), keeping what comes back unchanged --------


def _required(parent, child, visit):
    new = visit(child)
    if new is _REMOVE or new.__class__ is _Flatten:
        raise _not_allowed(parent, child, "RemovalSentinel" if new is _REMOVE else "FlattenSentinel")
    return new


def _optional(parent, child, visit):
    if child is None:
        return None
    new = visit(child)
    if new.__class__ is _Flatten:
        raise _not_allowed(parent, child, "FlattenSentinel")
    return None if new is _REMOVE else new


def _sentinel(parent, child, visit):
    if child.__class__ is cst.MaybeSentinel:
        return _DEFAULT
    new = visit(child)
    if new.__class__ is _Flatten:
        raise _not_allowed(parent, child, "FlattenSentinel")
    return _DEFAULT if new is _REMOVE else new


def _not_allowed(parent, child, sentinel: str) -> TypeError:
    return TypeError(f"We got a {sentinel} while visiting a {type(child).__name__}. This node's parent "
                     f"({type(parent).__name__}) does not allow it to be removed or replaced with a sequence.")


def _sequence(parent, children, visit, body: bool = False):
    """``body``: as ``visit_body_sequence``, a statement that became empty (its small statements
    removed) is dropped too."""
    out = None
    for i, child in enumerate(children):
        new = visit(child)
        if out is None:
            if new is child:
                continue
            out = list(children[:i])
        if new is _REMOVE:
            continue
        if new.__class__ is _Flatten:
            out.extend(n for n in new if not body or child._is_removable() or not n._is_removable())
        elif not body or child._is_removable() or not new._is_removable():
            out.append(new)
    return children if out is None else tuple(out)


def _body_sequence(parent, children, visit):
    return _sequence(parent, children, visit, body=True)


_HELPERS = {"visit_required": "_required", "visit_optional": "_optional", "visit_sentinel": "_sentinel",
            "visit_sequence": "_sequence", "visit_body_sequence": "_body_sequence"}


def _constructor(kind: type) -> tuple[list[tuple[str, str | None]], bool] | None:
    """The keywords ``kind._visit_and_replace_children`` builds its node with, each with the helper
    that visits it (None: copied); True for a node it returns as it is. None if it does more."""
    try:
        source = textwrap.dedent(inspect.getsource(kind._visit_and_replace_children))
    except (OSError, TypeError):
        return None
    function = ast.parse(source).body[0]
    body = [s for s in function.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return None
    value = body[0].value
    if isinstance(value, ast.Name) and value.id == "self":
        return [], True
    if not (isinstance(value, ast.Call) and not value.args and (
            (isinstance(value.func, ast.Name) and value.func.id == kind.__name__)
            or ast.unparse(value.func) == "self.__class__")):
        return None
    fields: list[tuple[str, str | None]] = []
    for keyword in value.keywords:
        arg = keyword.value
        if ast.unparse(arg) == f"self.{keyword.arg}":
            fields.append((keyword.arg, None))
        elif (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id in _HELPERS
              and ast.unparse(arg) == f"{arg.func.id}(self, {keyword.arg!r}, self.{keyword.arg}, visitor)"):
            fields.append((keyword.arg, _HELPERS[arg.func.id]))
        else:
            return None
    return fields, False


def _by_libcst(node, visit, transformer):
    return node._visit_and_replace_children(transformer)


def _unchanged(node, visit, transformer):
    return node


def _learn(kind: type) -> Callable:
    """Once per node type: a rebuild function compiled from LibCST's own constructor call."""
    found = _constructor(kind)
    if found is None:
        rebuild = _by_libcst
    elif found[1] or not any(helper for _, helper in found[0]):
        rebuild = _unchanged
    else:
        fields = found[0]
        visited = [(i, name, helper) for i, (name, helper) in enumerate(fields) if helper is not None]
        lines = ["def rebuild(node, visit, transformer):"]
        for i, name, helper in visited:
            lines.append(f"    old{i} = node.{name}")
            lines.append(f"    new{i} = {helper}(node, old{i}, visit)")
        same = " and ".join(f"new{i} is old{i}" for i, _, _ in visited)
        lines.append(f"    if {same}:")
        lines.append("        return node")
        arguments = ", ".join(f"{name}=new{i}" if helper else f"{name}=node.{name}"
                              for i, (name, helper) in enumerate(fields))
        lines.append(f"    return node.__class__({arguments})")
        namespace = {helper: globals()[helper] for helper in _HELPERS.values()}
        exec("\n".join(lines), namespace)  # field names read from LibCST's source, as walk.py does
        rebuild = namespace["rebuild"]
    _REBUILD[kind] = rebuild
    return rebuild
