"""Flax freezes what ``setup`` assigns to ``self``: a list becomes a tuple, a dict a FrozenDict.

Keras constructors fill containers after assigning them (``self.blocks = []`` then
``self.blocks.append(...)``, ``self.heads = {}`` then ``self.heads[level] = ...``); in Flax
the second step fails (a tuple has no ``append``, a FrozenDict is immutable). Such a
container is filled as a local and assigned once, at the end of ``setup``. And an attribute
``setup`` gives a list compares unequal to every list (``sorted(keys) != self.levels``), so
where one is compared with ``==``/``!=`` the comparison reads ``list(self.levels)``.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m
from tern.engine.dispatch import CachedHooks
from tern.engine.walk import findall
from tern.engine.transform import transform

SELF = "self"
_EMPTY = m.List(elements=[]) | m.Dict(elements=[]) | m.Call(func=m.Name("list") | m.Name("dict"), args=[])
_FILLERS = frozenset({"append", "extend", "insert", "update", "setdefault"})
_LISTS = m.List() | m.ListComp() | m.Call(func=m.Name("list") | m.Name("sorted"))


def _self_attr(node) -> str | None:
    return node.attr.value if m.matches(node, m.Attribute(value=m.Name(SELF), attr=m.Name())) else None


def _assigns(stmts, attr: str) -> bool:
    """Whether every way through ``stmts`` assigns ``self.<attr>`` (top level, or both arms of an if)."""
    for stmt in stmts:
        if isinstance(stmt, cst.SimpleStatementLine):
            if any(isinstance(s, cst.Assign) and any(_self_attr(t.target) == attr for t in s.targets) for s in stmt.body):
                return True
        elif isinstance(stmt, cst.If) and isinstance(stmt.orelse, (cst.Else, cst.If)):
            orelse = stmt.orelse.body.body if isinstance(stmt.orelse, cst.Else) else [stmt.orelse]
            if _assigns(stmt.body.body, attr) and _assigns(orelse, attr):
                return True
    return False


def filled_containers(setup: cst.FunctionDef) -> set[str]:
    """Attributes ``setup`` assigns an empty list/dict and then fills."""
    empty = set()
    for assign in findall(setup.body, m.Assign(targets=[m.AssignTarget()], value=_EMPTY)):
        attr = _self_attr(assign.targets[0].target)
        if attr is not None:
            empty.add(attr)
    filled = set()
    for call in findall(setup.body, m.Call(func=m.Attribute(attr=m.Name()))):
        if call.func.attr.value in _FILLERS and _self_attr(call.func.value) in empty:
            filled.add(_self_attr(call.func.value))
    for target in findall(setup.body, m.AssignTarget(target=m.Subscript())):
        if _self_attr(target.target.value) in empty:
            filled.add(_self_attr(target.target.value))
    return filled


class _ToLocal(CachedHooks):
    def __init__(self, attrs: set[str]):
        self.attrs = attrs

    def leave_Attribute(self, original, updated):
        attr = _self_attr(updated)
        return cst.Name(attr) if attr in self.attrs else updated


def _local_names(function: cst.FunctionDef) -> set[str]:
    """Names read or bound in ``function`` (not attribute names: ``self.x`` binds no ``x``)."""
    attrs = {id(a.attr) for a in findall(function, m.Attribute())}
    return {n.value for n in findall(function, m.Name()) if id(n) not in attrs}


def fill_as_locals(setup: cst.FunctionDef) -> tuple[cst.FunctionDef, set[str]]:
    """``setup`` with each filled container built in a local of its name, assigned at the end,
    and the filled containers that could not be (not assigned on every way through ``setup``,
    or their name is taken by a local)."""
    filled = filled_containers(setup)
    taken = _local_names(setup)
    attrs = {a for a in filled if a not in taken and _assigns(setup.body.body, a)}
    if not attrs:
        return setup, filled
    body = transform(setup.body, _ToLocal(attrs))
    stores = [cst.parse_statement(f"self.{a} = {a}\n") for a in sorted(attrs)]
    return setup.with_changes(body=body.with_changes(body=[*body.body, *stores])), filled - attrs


def setup_lists(setup: cst.FunctionDef | None) -> set[str]:
    """Attributes ``setup`` assigns a list (a literal, comprehension, ``list(...)``/``sorted(...)``)."""
    if setup is None:
        return set()
    out = set()
    for assign in findall(setup.body, m.Assign(targets=[m.AssignTarget(target=m.Attribute(value=m.Name(SELF)))])):
        if m.matches(assign.value, _LISTS):
            out.add(assign.targets[0].target.attr.value)
    return out


class CompareAsLists(CachedHooks):
    """``x != self.levels`` -> ``x != list(self.levels)`` for attributes setup made lists."""

    def __init__(self, attrs: set[str]):
        self.attrs = attrs

    def leave_Comparison(self, original, updated):
        if not any(m.matches(t.operator, m.Equal() | m.NotEqual()) for t in updated.comparisons):
            return updated
        left = self._list(updated.left)
        comparisons = [t.with_changes(comparator=self._list(t.comparator)) for t in updated.comparisons]
        return updated.with_changes(left=left, comparisons=comparisons)

    def _list(self, node):
        if _self_attr(node) in self.attrs:
            return cst.Call(func=cst.Name("list"), args=[cst.Arg(node)])
        return node


class FrozenDictChecks(CachedHooks):
    """``isinstance(x, dict)`` -> ``isinstance(x, (dict, FrozenDict))`` in a module's methods.

    Flax freezes a dict a module holds (a field given a dict, or one ``setup`` assigns) into a
    FrozenDict, which is no ``dict``: the check that accepted the user's dict in Keras would
    refuse it. FrozenDict is what such a dict becomes, so the check accepts exactly what it
    accepted before. (A list becomes a tuple; ``isinstance(x, list)`` is left alone, since
    accepting tuples would accept what Keras refused.)"""

    def __init__(self, frozen_dict):
        self.frozen_dict = frozen_dict  # () -> the spelled name, its import scheduled only when used

    def leave_Call(self, original, updated):
        if not m.matches(updated, m.Call(func=m.Name("isinstance"), args=[m.Arg(keyword=None), m.Arg(keyword=None)])):
            return updated
        kinds = updated.args[1].value
        names = [e.value for e in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
        if not any(m.matches(n, m.Name("dict")) for n in names) or any(m.matches(n, m.Name("FrozenDict")) for n in names):
            return updated
        elements = [cst.Element(n) for n in names] + [cst.Element(self.frozen_dict())]
        return updated.with_deep_changes(updated.args[1], value=cst.Tuple(elements))
