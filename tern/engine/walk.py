"""Read-only walks over a LibCST tree that do not rebuild it.

``node.visit(visitor)`` rebuilds every node of the subtree, even for a ``CSTVisitor`` that
changes nothing, and ``libcst.matchers.findall`` walks that way: on the engine's hot paths
the rebuilding was most of the time. These read a node's children straight off its fields,
in the order LibCST itself visits them, so visitors and matchers see exactly the nodes, in
exactly the order, they would have seen. Transformers (which return new trees) still use
``node.visit``.
"""

from __future__ import annotations

import ast
import bisect
import contextlib
import contextvars
import dataclasses
import functools
import inspect
import re
import textwrap
import typing
from typing import Callable, Iterator

import libcst as cst
import libcst.matchers as m

from tern.engine.dispatch import class_table, has_field_hooks, hooks, own_hooks

#: per node type, the function that lists its children (learnt on first sight, ``_learn``)
_CHILDREN: dict[type, Callable[[cst.CSTNode], list[cst.CSTNode]]] = {}
_VISITS = re.compile(r"visit_[a-z_]+")


def _written_fields(kind: type) -> dict[str, set[str]] | None:
    """The fields ``kind._visit_and_replace_children`` passes to LibCST's ``visit_*`` helpers, in
    the order it passes them, each with the helpers it is passed to (``visit_required``: always a
    node; ``visit_sequence``: a sequence; others: maybe absent). Read from its source, since some
    fields are visited only when set (``FormattedStringExpression.format_spec``) and the order is
    not always the dataclass' (``Call`` visits ``lpar`` before ``func``)."""
    try:
        source = textwrap.dedent(inspect.getsource(kind._visit_and_replace_children))
    except (OSError, TypeError):
        return None
    calls = [
        call for call in ast.walk(ast.parse(source))
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and _VISITS.fullmatch(call.func.id)
        and len(call.args) >= 2 and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str)
    ]
    calls.sort(key=lambda call: (call.lineno, call.col_offset))
    fields: dict[str, set[str]] = {}
    for call in calls:
        fields.setdefault(call.args[1].value, set()).add(call.func.id)
    return fields


def _present(value) -> tuple | list:
    """A field that may hold nothing (None, MaybeSentinel), one node, or a sequence of them."""
    if value is None or value.__class__ is cst.MaybeSentinel:
        return ()
    return value if value.__class__ is tuple or value.__class__ is list else (value,)  # not isinstance of an ABC: slow


def _compiled(fields: dict[str, set[str]]) -> Callable[[cst.CSTNode], list[cst.CSTNode]]:
    """One list display per node type (``[*node.lpar, node.func, ...]``): the walk's inner loop,
    several times faster than reading the fields by name in a loop."""
    parts = []
    for name, helpers in fields.items():
        if helpers == {"visit_required"}:
            parts.append(f"node.{name}")
        elif helpers <= {"visit_sequence", "visit_body_sequence"}:
            parts.append(f"*(node.{name} or ())")
        else:
            parts.append(f"*_present(node.{name})")
    namespace = {"_present": _present}
    exec(f"def children(node):\n    return [{', '.join(parts)}]\n", namespace)  # field names read from LibCST's source
    return namespace["children"]


class _FieldOrder(cst.CSTVisitor):
    """The fields LibCST's visit announces for one node, in order."""

    def __init__(self, root: cst.CSTNode):
        self.root = root
        self.fields: list[str] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        return node is self.root

    def on_leave(self, node: cst.CSTNode) -> None:
        pass

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        if node is self.root and attribute not in self.fields:
            self.fields.append(attribute)

    def on_leave_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        pass


def _libcst_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    return list(node.children)


def _learn(node: cst.CSTNode) -> Callable[[cst.CSTNode], list[cst.CSTNode]]:
    """Once per node type: the written fields, checked against what LibCST's own visit of this
    node announces (one shallow rebuild). Where they disagree LibCST is asked for every node."""
    fields = _written_fields(type(node))
    lister = _libcst_children
    if fields is not None:
        recorder = _FieldOrder(node)
        node.visit(recorder)
        written = iter(fields)
        if all(name in written for name in recorder.fields):  # a subsequence, in order
            lister = _compiled(fields)
    _CHILDREN[type(node)] = lister
    return lister


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """``node.children`` without the rebuild: the same nodes, in lexical order."""
    return (_CHILDREN.get(node.__class__) or _learn(node))(node)


def nodes(root: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """``root`` and every node below it, in pre-order (the order a visitor meets them)."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        below = (_CHILDREN.get(node.__class__) or _learn(node))(node)
        below.reverse()
        stack.extend(below)


#: nodes the index leaves out, with what is below them: whitespace, comments and punctuation,
#: three in five of a file's nodes, which no rule looks for (a search for one walks the tree)
_UNINDEXED_BASES = (cst.BaseParenthesizableWhitespace, cst.EmptyLine, cst.TrailingWhitespace, cst.Newline,
                    cst.Comment, cst.Comma, cst.LeftParen, cst.RightParen, cst.Dot, cst.AssignEqual)
_UNINDEXED = frozenset(name for name, value in vars(cst).items()
                       if isinstance(value, type) and issubclass(value, _UNINDEXED_BASES))
_INDEXED_CHILDREN: dict[type, Callable[[cst.CSTNode], list[cst.CSTNode]]] = {}


def _field_classes(annotation) -> list:
    args = typing.get_args(annotation)
    return [c for a in args for c in _field_classes(a)] if args else [annotation]


def _learn_indexed(node: cst.CSTNode) -> Callable[[cst.CSTNode], list[cst.CSTNode]]:
    """Like ``_learn``, without the fields that can only hold nodes the index leaves out."""
    kind = type(node)
    fields = _written_fields(kind)
    lister = None
    if fields is not None and (_CHILDREN.get(kind) or _learn(node)) is not _libcst_children:
        declared = {f.name: f.type for f in dataclasses.fields(kind)}
        kept = {}
        for name, helpers in fields.items():
            classes = [c for c in _field_classes(declared.get(name)) if isinstance(c, type)
                       and c not in (cst.MaybeSentinel, type(None), str)]
            if not (classes and all(issubclass(c, _UNINDEXED_BASES) for c in classes)):
                kept[name] = helpers
        lister = _compiled(kept)
    if lister is None:
        def lister(n):
            return [c for c in children(n) if c.__class__.__name__ not in _UNINDEXED]
    _INDEXED_CHILDREN[kind] = lister
    return lister


class TreeIndex:
    """One tree's nodes in pre-order (whitespace, comments and punctuation left out), and per
    node type name the positions of that type's nodes.

    Why: rules ask about the same file many times (every function's calls, every class's
    assignments), and each walk of a function also walks the functions inside it. On an
    indexed tree, finding the nodes of a type below a node is two bisections and a loop over
    what is found. LibCST nodes are immutable, so an index stays true while its tree lives;
    it holds every node it knows, so an id it knows is never reused for another node."""

    def __init__(self, root: cst.CSTNode):
        self.positions: dict[int, tuple[cst.CSTNode, int]] = {}
        self.by_type: dict[str, tuple[list[int], list[cst.CSTNode]]] = {}
        self._ends: dict[int, int] = {}
        positions, by_type, listers = self.positions, self.by_type, _INDEXED_CHILDREN
        position = 0
        stack: list = [root]
        while stack:
            item = stack.pop()
            kind = item.__class__
            positions[id(item)] = (item, position)
            found = by_type.get(kind.__name__)
            if found is None:
                found = by_type[kind.__name__] = ([], [])
            found[0].append(position)
            found[1].append(item)
            position += 1
            below = (listers.get(kind) or _learn_indexed(item))(item)
            below.reverse()
            stack.extend(below)

    def span(self, node: cst.CSTNode) -> tuple[int, int] | None:
        """Where ``node``'s subtree lies in the pre-order, None for a node not of this tree (or
        one the index leaves out)."""
        entry = self.positions.get(id(node))
        if entry is None or entry[0] is not node:
            return None
        end = self._ends.get(id(node))
        if end is None:  # one past its last descendant: follow the last child down
            last = node
            while True:
                below = _INDEXED_CHILDREN[last.__class__](last)
                if not below:
                    break
                last = below[-1]
            end = self._ends[id(node)] = self.positions[id(last)][1] + 1
        return entry[1], end

    def of_types(self, kinds, start: int, end: int) -> list[tuple[int, cst.CSTNode]]:
        """The nodes whose type is named in ``kinds`` at positions ``start <= p < end``, in pre-order."""
        hits: list[tuple[int, cst.CSTNode]] = []
        for kind in kinds:
            found = self.by_type.get(kind)
            if found is None:
                continue
            positions, nodes_ = found
            lo, hi = bisect.bisect_left(positions, start), bisect.bisect_left(positions, end)
            hits.extend(zip(positions[lo:hi], nodes_[lo:hi]))
        if len(kinds) > 1:
            hits.sort(key=_position)
        return hits


def _position(hit: tuple[int, cst.CSTNode]) -> int:
    return hit[0]


_INDEX: contextvars.ContextVar[TreeIndex | None] = contextvars.ContextVar("tern_tree_index", default=None)


@contextlib.contextmanager
def indexed(root: cst.CSTNode) -> Iterator[TreeIndex]:
    """Inside, ``findall`` and ``walk`` on ``root`` or any node of it read the index."""
    index = TreeIndex(root)
    token = _INDEX.set(index)
    try:
        yield index
    finally:
        _INDEX.reset(token)


def _indexed_span(node: cst.CSTNode, kinds: frozenset[str]) -> tuple[TreeIndex, int, int] | None:
    index = _INDEX.get()
    if index is None or not kinds.isdisjoint(_UNINDEXED):
        return None
    span = index.span(node)
    return None if span is None else (index, *span)


def walk(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """``node.visit(visitor)`` for a read-only visitor: the same ``on_visit``/``on_leave`` calls in
    the same order, nothing rebuilt. A visitor with per-field hooks gets LibCST's own visit."""
    if has_field_hooks(visitor):
        node.visit(visitor)
    elif type(visitor).on_visit is cst.CSTVisitor.on_visit and type(visitor).on_leave is cst.CSTVisitor.on_leave:
        kinds = None if own_hooks(visitor) else _visit_only_types(type(visitor))
        found = None if kinds is None else _indexed_span(node, kinds)
        if found is not None:
            _visit_indexed(visitor, kinds, *found)
        else:
            _dispatch(node, visitor)
    else:
        _walk(node, visitor)


_NODE_TYPES = frozenset(name for name, value in vars(cst).items() if isinstance(value, type) and issubclass(value, cst.CSTNode))


@functools.lru_cache(maxsize=1024)  # bounded: rules define visitor classes inside functions
def _typed_hooks(visitor_class: type) -> tuple[frozenset[str], frozenset[str]]:
    """The node types a visitor class has ``visit_<Type>`` methods for, and ``leave_<Type>`` ones."""
    visits, leaves = set(), set()
    for kind in visitor_class.__mro__:
        if kind is cst.CSTVisitor:
            break
        for name in vars(kind):
            prefix, _, rest = name.partition("_")
            if rest in _NODE_TYPES:
                (visits if prefix == "visit" else leaves if prefix == "leave" else set()).add(rest)
    return frozenset(visits), frozenset(leaves)


def _visit_only_types(visitor_class: type) -> frozenset[str] | None:
    """The node types a visitor class visits, when it has no ``leave_<Type>`` (those are called
    in post-order, which the index does not give); else None."""
    visits, leaves = _typed_hooks(visitor_class)
    return None if leaves else visits


def _visit_indexed(visitor: cst.CSTVisitor, kinds: frozenset[str], index: TreeIndex, start: int, end: int) -> None:
    """``_dispatch`` read off the index: the visitor's ``visit_<Type>`` calls, in pre-order; a call
    that returns False skips the nodes below it, as LibCST's visit does."""
    skip_to = start
    for position, node in index.of_types(kinds, start, end):
        if position < skip_to:
            continue
        if getattr(visitor, "visit_" + node.__class__.__name__)(node) is False:
            skip_to = index.span(node)[1]


def _walk(node: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    if visitor.on_visit(node):
        for child in children(node):
            _walk(child, visitor)
    visitor.on_leave(node)


def _dispatch(root: cst.CSTNode, visitor: cst.CSTVisitor) -> None:
    """``_walk`` for a visitor with LibCST's own ``on_visit``/``on_leave``: their lookup of the
    ``visit_<Type>`` method (an f-string and a ``getattr`` per node and per callback) is done
    once per visitor class and node type, and the stubs of the types the visitor has no method
    for are not called."""
    if own_hooks(visitor):
        _walk(root, visitor)
        return
    table = _class_hooks(type(visitor))
    visit_types, leave_types = _typed_hooks(type(visitor))
    leaves = bool(leave_types)
    # no hook of the visitor's is for whitespace or punctuation: what is below those is not entered
    lean = _UNINDEXED.isdisjoint(visit_types) and _UNINDEXED.isdisjoint(leave_types)
    listers, learn = (_INDEXED_CHILDREN, _learn_indexed) if lean else (_CHILDREN, _learn)
    stack: list = [root]
    while stack:
        item = stack.pop()
        if item.__class__ is tuple:  # (node,): its children are done, leave it
            node = item[0]
            leave = table[node.__class__][1]
            if leave is not None:
                leave(visitor, node)
            continue
        kind = item.__class__
        pair = table.get(kind)
        if pair is None:
            pair = table[kind] = hooks(type(visitor), cst.CSTVisitor, kind)
        if leaves:
            stack.append((item,))
        if pair[0] is None or pair[0](visitor, item) is not False:
            below = (listers.get(kind) or learn(item))(item)
            below.reverse()
            stack.extend(below)


_CLASS_HOOKS: dict[type, dict[type, tuple[Callable | None, Callable | None]]] = {}


def _class_hooks(visitor_class: type) -> dict[type, tuple[Callable | None, Callable | None]]:
    """Per node type, the class' ``visit_<Type>``/``leave_<Type>`` functions (None for LibCST's stubs)."""
    return class_table(_CLASS_HOOKS, visitor_class)


def _node_types(matcher: m.BaseMatcherNode) -> frozenset[str] | None:
    """The node type names ``matcher`` can match (None: any). A plain node matcher such as
    ``m.Call(...)`` matches only nodes whose class has its name (LibCST compares the names)."""
    if isinstance(matcher, (m.OneOf, m.TypeOf)):
        kinds = [_node_types(option) for option in matcher.options]
        return None if any(k is None for k in kinds) else frozenset().union(*kinds)
    if isinstance(matcher, m.AllOf) or type(matcher).__module__ != m.__name__:
        return None
    return frozenset((type(matcher).__name__,))


def _test(matcher) -> Callable[[cst.CSTNode], bool] | None:
    """How ``libcst.matchers.findall`` decides one node, or None where that is not proven the same."""
    if isinstance(matcher, m.MatchIfTrue):
        return lambda node: bool(matcher.func(node))
    if isinstance(matcher, m.BaseMatcherNode):
        return _any if _bare(matcher) else lambda node: m.matches(node, matcher)
    return None  # DoesNotMatch, SaveMatchedNode, metadata matchers: LibCST's own findall


def _any(node: cst.CSTNode) -> bool:
    """The test of a bare node matcher: any node of its type matches."""
    return True


_DO_NOT_CARE = m.DoNotCare()
_MATCHER_FIELDS: dict[type, tuple[str, ...]] = {}


def _bare(matcher: m.BaseMatcherNode) -> bool:
    """A node matcher that asks for nothing but its type (``m.Call()``): LibCST compares the class
    names, then each field, and every field is ``DoNotCare``."""
    kind = type(matcher)
    if kind.__module__ != m.__name__:  # OneOf, AllOf and other special matchers
        return False
    names = _MATCHER_FIELDS.get(kind)
    if names is None:
        names = _MATCHER_FIELDS[kind] = tuple(f.name for f in dataclasses.fields(kind) if f.name != "_metadata")
    return all(getattr(matcher, name) is _DO_NOT_CARE for name in names)


def findall(tree: cst.CSTNode | cst.MaybeSentinel | cst.RemovalSentinel, matcher) -> list[cst.CSTNode]:
    """``libcst.matchers.findall(tree, matcher)``: the same nodes in the same order (pre-order, the
    root included), found without rebuilding the tree and trying the matcher only on nodes of a type
    it can match."""
    if isinstance(tree, (cst.MaybeSentinel, cst.RemovalSentinel)):
        return []
    test = _test(matcher) if isinstance(tree, cst.CSTNode) else None
    if test is None:
        return list(m.findall(tree, matcher))
    kinds = _node_types(matcher) if isinstance(matcher, m.BaseMatcherNode) else None
    if kinds is not None:
        found_span = _indexed_span(tree, kinds)
        if found_span is not None:
            index, start, end = found_span
            if test is _any:
                return [node for _, node in index.of_types(kinds, start, end)]
            return [node for _, node in index.of_types(kinds, start, end) if test(node)]
    # what no matcher of these kinds can match below (whitespace, punctuation) is not entered
    listers, learn = (_INDEXED_CHILDREN, _learn_indexed) if kinds is not None and kinds.isdisjoint(_UNINDEXED) \
        else (_CHILDREN, _learn)
    found = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if (kinds is None or node.__class__.__name__ in kinds) and test(node):
            found.append(node)
        below = (listers.get(node.__class__) or learn(node))(node)
        below.reverse()
        stack.extend(below)
    return found
