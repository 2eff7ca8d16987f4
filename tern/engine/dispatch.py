"""Finding a visitor's ``visit_<Type>``/``leave_<Type>`` methods once per node type.

LibCST's ``on_visit``/``on_leave`` build the method name with an f-string and ``getattr`` it
for every node, and ``on_visit_attribute``/``on_leave_attribute`` do the same for every field
of every node, mostly to call one of LibCST's ~1,600 empty stubs. On a whole-file transform
that lookup cost as much as a tenth of the run. The methods found, and the order they are
called in, are LibCST's.
"""

from __future__ import annotations

import functools
import re
from typing import Callable

import libcst as cst

# visit_Call_func and the like: called between a node's fields
_FIELD_HOOK = re.compile(r"(visit|leave)_[A-Z][A-Za-z]*_[a-z_]+")


def has_field_hooks(visitor: cst.CSTVisitor | cst.CSTTransformer) -> bool:
    """Whether the visitor defines per-field hooks (or the callbacks that call them)."""
    return _class_has_field_hooks(type(visitor)) or any(_is_hook(name) for name in vars(visitor))


def _is_hook(name: str) -> bool:
    return name in ("on_visit_attribute", "on_leave_attribute") or bool(_FIELD_HOOK.fullmatch(name))


@functools.lru_cache(maxsize=1024)  # bounded: rules define visitor classes inside functions
def _class_has_field_hooks(visitor_class: type) -> bool:
    for kind in visitor_class.__mro__:
        if kind in (cst.CSTVisitor, cst.CSTTransformer):
            return False
        if any(_is_hook(name) for name in vars(kind)):
            return True
    return False


def hooks(visitor, base: type, kind: type) -> tuple[Callable | None, Callable | None]:
    """``visit_<kind>`` and ``leave_<kind>`` as ``base.on_visit``/``on_leave`` would find them on
    ``visitor`` (an instance: bound methods; a class: its functions); None for ``base``'s own
    stubs, which do nothing (visit) or return the updated node (a transformer's leave)."""
    found = []
    for prefix in ("visit_", "leave_"):
        method = getattr(visitor, prefix + kind.__name__, None)
        stub = getattr(base, prefix + kind.__name__, None)
        found.append(None if method is None or getattr(method, "__func__", method) is stub else method)
    return found[0], found[1]


_CLASS_TABLES: dict[type, dict] = {}


def class_table(tables: dict[type, dict], visitor_class: type) -> dict:
    """``tables``' hook table for ``visitor_class``, which its instances share (a file makes new
    visitors, whose hooks are their class'): filled once per class and node type, not per file."""
    table = tables.get(visitor_class)
    if table is None:
        table = {}
        if len(tables) < 1024:  # bounded: rules define visitor classes inside functions
            tables[visitor_class] = table
    return table


def own_hooks(visitor: cst.CSTVisitor | cst.CSTTransformer) -> bool:
    """Whether the visitor object itself holds hooks (rare): then its hooks are not its class'."""
    return any(name.startswith(("visit_", "leave_")) for name in vars(visitor))


class CachedHooks(cst.CSTTransformer):
    """A ``CSTTransformer`` that finds its hooks once per class and node type (an instance that
    holds hooks of its own: once per instance). For transformers whose classes define no
    per-field hooks (``visit_Call_func``): it calls none.

    The table holds the hooks' functions, called with the transformer, not bound methods: a
    bound method kept on its own instance is a reference cycle, and the transformer (with the
    file's trees it holds) would wait for the cyclic collector instead of going when the file
    is done."""

    def hook_table(self) -> dict[type, tuple[Callable | None, Callable | None]]:
        """Node type -> its (visit, leave) hook functions, as far as ``hooks_of`` filled it."""
        try:
            return self.__dict__["_hook_table"]
        except KeyError:
            table = self.__dict__["_hook_table"] = class_table(_CLASS_TABLES, type(self)) if not own_hooks(self) else {}
            return table

    def hooks_of(self, kind: type) -> tuple[Callable | None, Callable | None]:
        """The (visit, leave) hook functions for nodes of type ``kind``, each called with the
        transformer first; None where there is none."""
        table = self.hook_table()
        pair = table.get(kind)
        if pair is None:
            visit, leave = hooks(self, cst.CSTTransformer, kind)
            pair = table[kind] = (self._function(visit), self._function(leave))
        return pair

    def _function(self, method: Callable | None) -> Callable | None:
        """``method`` as a function of the transformer and the hook's arguments."""
        if method is None:
            return None
        if getattr(method, "__self__", None) is self:
            return method.__func__
        return lambda _self, *args: method(*args)  # a hook set on the instance itself

    def on_visit(self, node: cst.CSTNode) -> bool:
        try:  # called for every node: the table read inline, filled on a miss
            visit = self._hook_table[node.__class__][0]
        except (AttributeError, KeyError):
            visit = self.hooks_of(node.__class__)[0]
        return visit is None or visit(self, node) is not False

    def on_leave(self, original_node, updated_node):
        try:
            leave = self._hook_table[original_node.__class__][1]
        except (AttributeError, KeyError):
            leave = self.hooks_of(original_node.__class__)[1]
        return updated_node if leave is None else leave(self, original_node, updated_node)

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        pass

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        for name in vars(cls):
            if _FIELD_HOOK.fullmatch(name):
                raise TypeError(f"{cls.__name__}.{name}: CachedHooks calls no per-field hooks")
