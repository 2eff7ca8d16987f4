"""Fast ``ast`` walks, and walks kept while a pass reads the same trees many times.

Why fast: ``ast.iter_child_nodes`` is two nested generators over ``ast.iter_fields``, about
half a microsecond a node, and the pre-pass and translation walk millions of nodes. Here each
node type gets, on first sight, a small function compiled for its fields (``_learn``), and
``children``, ``walk`` and ``own_nodes`` use it: the same nodes in the same order, in about
two thirds of the time (the rest is mostly reading the nodes from memory).

Why kept: the package pre-pass and the features' package analyses walk the same modules and
functions again and again (on 100 Keras sources: 2.1 M nodes walked, of 0.65 M distinct).
Inside ``kept_walks()`` a tree's walk is kept as a tuple, so each later walk of it is a loop
over that tuple, in the same order. The trees must not change while kept: the pre-pass only
reads them. Outside the context (and in other threads) the walks are made afresh each time.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import keyword
import re
from typing import Callable, Iterator

_KEPT: contextvars.ContextVar[dict | None] = contextvars.ContextVar("tern_kept_walks", default=None)

#: a function's own nodes stop at these (their bodies are other scopes)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@contextlib.contextmanager
def kept_walks() -> Iterator[None]:
    """Keep the walks made inside (nested uses share the outermost's)."""
    if _KEPT.get() is not None:
        yield
        return
    token = _KEPT.set({})
    try:
        yield
    finally:
        _KEPT.reset(token)


def children(node: ast.AST) -> list[ast.AST]:
    """``list(ast.iter_child_nodes(node))``: the same nodes in the same order, in a new list."""
    out: list[ast.AST] = []
    (_APPENDERS.get(type(node)) or _learn(type(node)))(node, out.append)
    return out


def walk(node: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk(node)``: the same nodes in the same order."""
    kept = _KEPT.get()
    if kept is None:
        return _walk(node)
    return iter(_kept(kept, "walk", node, lambda: tuple(_walk_all(node))))


def own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """Every node below ``fn`` except those inside nested functions, lambdas and classes
    (which are yielded themselves, not entered)."""
    kept = _KEPT.get()
    if kept is None:
        return _own_nodes(fn)
    return iter(_kept(kept, "own", fn, lambda: tuple(_own_all(fn))))


def _kept(kept: dict, kind: str, node: ast.AST, make) -> tuple:
    hit = kept.get((kind, id(node)))
    if hit is None or hit[0] is not node:  # the node itself is kept too, so its id is not reused
        hit = kept[(kind, id(node))] = (node, make())
    return hit[1]


# The walks below are ast.walk's breadth-first order with the list itself as the queue (a
# list iterator sees what is appended while it runs), and _own_nodes's depth-first stack.
# As in ast.walk, a node's children are read when the node is reached, not before.

def _walk(node: ast.AST) -> Iterator[ast.AST]:
    todo = [node]
    get, append = _APPENDERS.get, todo.append
    for node in todo:
        (get(type(node)) or _learn(type(node)))(node, append)
        yield node


def _walk_all(node: ast.AST) -> list[ast.AST]:
    return list(_walk(node))


def _own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    todo = children(fn)
    get, append = _APPENDERS.get, todo.append
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, SCOPES):
            (get(type(node)) or _learn(type(node)))(node, append)


def _own_all(fn: ast.AST) -> list[ast.AST]:
    return list(_own_nodes(fn))


#: node type -> a function that passes each of a node's children to ``append``, in order
_APPENDERS: dict[type, Callable[[ast.AST, Callable[[ast.AST], None]], None]] = {}

_LEAVES = {"identifier", "string", "int", "constant"}  # ASDL builtins: never a node


def _learn(cls: type) -> Callable:
    """Compile ``cls``'s appender. As in ``iter_child_nodes``, every field is read, a value is
    a child if it is an ``ast.AST``, a list gives its ``ast.AST`` items, and anything else
    (None, names, constants) is skipped; if a field is missing, the node is left to
    ``iter_child_nodes``. The field's declared ASDL type only chooses which test comes first."""
    fields = tuple(cls._fields)
    lines = ["def append_children(node, append):", "    pass"]
    if fields:
        lines[1:] = ["    try:", *(f"        v{i} = {_read(name)}" for i, name in enumerate(fields)),
                     "    except AttributeError:",
                     "        for child in iter_child_nodes(node):",
                     "            append(child)",
                     "        return"]
    kinds = _declared(cls)
    for i, name in enumerate(fields):
        lines += ["    " + line for line in _tests(f"v{i}", kinds.get(name, ""))]
    namespace = {"AST": ast.AST, "AST_OR_LIST": (ast.AST, list), "iter_child_nodes": ast.iter_child_nodes}
    exec(compile("\n".join(lines), f"<children of {cls.__name__}>", "exec"), namespace)
    _APPENDERS[cls] = namespace["append_children"]
    return namespace["append_children"]


def _tests(value: str, kind: str) -> list[str]:
    """The lines passing ``value``'s children to ``append``, most likely case first."""
    node = [f"if isinstance({value}, AST):", f"    append({value})"]
    items = [f"if isinstance({value}, list):", f"    for x in {value}:",
             "        if isinstance(x, AST):", "            append(x)"]
    first, second = (items, node) if kind.endswith("*") else (node, items)
    lines = [*first, "el" + second[0], *second[1:]]
    if kind.endswith("*"):
        return lines
    if kind.rstrip("?") in _LEAVES:  # one test for the usual name or constant
        return [f"if isinstance({value}, AST_OR_LIST):", *("    " + line for line in lines)]
    if kind.endswith("?"):  # usually None
        return [f"if {value} is not None:", *("    " + line for line in lines)]
    return lines


def _read(name: str) -> str:
    return f"node.{name}" if name.isidentifier() and not keyword.iskeyword(name) else f"getattr(node, {name!r})"


def _declared(cls: type) -> dict[str, str]:
    """Field name -> ASDL type (``expr``, ``stmt*``, ``identifier?``), from a signature such
    as ``Name(identifier id, expr_context ctx)``; empty if the class has none."""
    match = re.fullmatch(rf"{re.escape(cls.__name__)}\((.*)\)", (cls.__doc__ or "").strip())
    if match is None:
        return {}
    pairs = [part.split() for part in match.group(1).split(",")]
    return {pair[1]: pair[0] for pair in pairs if len(pair) == 2}


def statements(tree: ast.AST, *, own: bool = False):
    """Every statement, at any depth (expressions are not entered: much cheaper than
    ``ast.walk``); ``own``: not those inside nested functions and classes."""
    stack = list(reversed(tree)) if isinstance(tree, list) else [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.stmt):
            yield node
            if own and isinstance(node, SCOPES):
                continue
        for name in ("handlers", "cases", "finalbody", "orelse", "body"):
            block = getattr(node, name, None)
            if isinstance(block, list):
                stack.extend(reversed(block))
