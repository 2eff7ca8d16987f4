"""``tern.engine.walk`` against LibCST itself, on real code: the fixtures (before and after)
and a sample of the installed Keras sources. A walker that skipped, added or reordered a
child, or a findall that found other nodes, would change translations silently."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import libcst.matchers as m
import pytest

from keras_sources import keras_sample
from tern.engine import walk

ROOT = Path(__file__).resolve().parents[1]
KERAS_SAMPLE = 30


def _modules() -> list[tuple[str, cst.Module]]:
    files = sorted((ROOT / "fixtures" / "tf").rglob("*.py")) + sorted((ROOT / "fixtures" / "expected").rglob("*.py"))
    out = []
    for path in files + keras_sample(KERAS_SAMPLE):
        try:
            out.append((str(path), cst.parse_module(path.read_text(encoding="utf-8"))))
        except (cst.ParserSyntaxError, UnicodeDecodeError):
            continue
    return out


@pytest.fixture(scope="module")
def modules() -> list[tuple[str, cst.Module]]:
    found = _modules()
    assert len(found) > 250
    return found


class _Events(cst.CSTVisitor):
    """Every on_visit and on_leave, in order: the whole shape of the walk."""

    def __init__(self, prune: type | None = None):
        self.events: list[tuple[str, int]] = []
        self.prune = prune

    def on_visit(self, node) -> bool:
        self.events.append(("visit", id(node)))
        return not isinstance(node, self.prune) if self.prune else True

    def on_leave(self, node) -> None:
        self.events.append(("leave", id(node)))


def test_children_are_libcsts_children(modules):
    """For every node (of every fourth file: the walk below covers the rest through the shape of
    the whole walk): the same child objects, in the same order, as ``node.children``."""
    for path, module in modules[::4]:
        for node in walk.nodes(module):
            assert walk.children(node) == list(node.children), (path, type(node).__name__)
            assert all(a is b for a, b in zip(walk.children(node), node.children)), (path, type(node).__name__)


@pytest.mark.parametrize("prune", [None, cst.FunctionDef, cst.Call])
def test_walk_makes_the_calls_visit_makes(modules, prune):
    """Same on_visit/on_leave calls in the same order, also where a visit returns False. The
    events' nesting is the tree's shape: equal events mean equal children for every node."""
    for path, module in modules if prune is None else modules[::4]:
        ours, theirs = _Events(prune), _Events(prune)
        walk.walk(module, ours)
        module.visit(theirs)
        assert ours.events == theirs.events, path


class _Typed(cst.CSTVisitor):
    """LibCST's own on_visit/on_leave, typed hooks only: what most of our visitors are."""

    def __init__(self):
        self.events: list[tuple[str, int]] = []

    def visit_FunctionDef(self, node) -> bool:
        self.events.append(("def", id(node)))
        return len(node.params.params) < 2  # a visit returning False skips the children

    def leave_FunctionDef(self, node) -> None:
        self.events.append(("/def", id(node)))

    def visit_Call(self, node) -> None:
        self.events.append(("call", id(node)))

    def leave_Attribute(self, node) -> None:
        self.events.append(("/attribute", id(node)))

    def visit_Name(self, node) -> bool:
        self.events.append(("name", id(node)))
        return True


def test_walk_calls_typed_hooks_as_visit_does(modules):
    for path, module in modules:
        ours, theirs = _Typed(), _Typed()
        walk.walk(module, ours)
        module.visit(theirs)
        assert ours.events == theirs.events, path


MATCHERS = {
    "call": m.Call(),
    "self": m.Name("self"),
    "attribute of a name": m.Attribute(attr=m.Name()),
    "if true": m.MatchIfTrue(lambda n: isinstance(n, cst.Name) and n.value.startswith("s")),
    "one of": m.OneOf(m.Call(func=m.Attribute()), m.Name("x"), m.Integer()),
    "all of": m.AllOf(m.Call(), m.Call(args=[m.ZeroOrMore()])),
    "type of": m.TypeOf(m.Name, m.Attribute)(),
    "not a name": m.DoesNotMatch(m.Name()),
    "nested": m.Call(func=m.Attribute(value=m.Name("self")), args=[m.Arg(), m.ZeroOrMore()]),
}


@pytest.mark.parametrize("name", MATCHERS)
def test_findall_finds_what_libcst_finds(modules, name):
    matcher = MATCHERS[name]
    for path, module in modules[::5]:
        ours, theirs = walk.findall(module, matcher), m.findall(module, matcher)
        assert len(ours) == len(theirs) and all(a is b for a, b in zip(ours, theirs)), (path, name)


def test_findall_on_a_sentinel_finds_nothing():
    assert walk.findall(cst.MaybeSentinel.DEFAULT, m.Name()) == [] == list(m.findall(cst.MaybeSentinel.DEFAULT, m.Name()))


def test_a_visitor_with_attribute_hooks_gets_libcsts_visit():
    """``visit_Call_func`` is called between fields: ``walk`` hands such a visitor to LibCST."""
    class Funcs(cst.CSTVisitor):
        def __init__(self):
            self.seen = 0

        def visit_Call_func(self, node) -> None:
            self.seen += 1

    funcs = Funcs()
    walk.walk(cst.parse_module("f(g(x))\n"), funcs)
    assert funcs.seen == 2


# -- the index: findall and visit-only walks read it on an indexed tree ------------------------

MATCHERS["comma (not indexed)"] = m.Comma()
MATCHERS["comment (not indexed)"] = m.Comment()


def _subtrees(module: cst.Module) -> list[cst.CSTNode]:
    """What rules ask about: the module, its functions, classes, blocks and statements, and
    expressions (a sample), with whitespace nodes the index leaves out."""
    kinds = (cst.FunctionDef, cst.ClassDef, cst.IndentedBlock, cst.SimpleStatementLine, cst.If, cst.Call, cst.Comma,
             cst.SimpleWhitespace)
    found = [node for node in walk.nodes(module) if isinstance(node, kinds)]
    return [module, *found[::7]]


@pytest.mark.parametrize("name", MATCHERS)
def test_findall_on_an_indexed_tree_finds_what_libcst_finds(modules, name):
    matcher = MATCHERS[name]
    for path, module in modules[::5]:
        with walk.indexed(module):
            for tree in _subtrees(module):
                ours, theirs = walk.findall(tree, matcher), list(m.findall(tree, matcher))
                assert len(ours) == len(theirs) and all(a is b for a, b in zip(ours, theirs)), (path, name, type(tree))


class _VisitOnly(cst.CSTVisitor):
    """Typed visits and no leaves: the visitors the index serves. Pruning at functions with
    two parameters or more, and at calls of ``print``."""

    def __init__(self):
        self.events: list[tuple[str, int]] = []

    def visit_FunctionDef(self, node) -> bool:
        self.events.append(("def", id(node)))
        return len(node.params.params) < 2

    def visit_Call(self, node) -> bool:
        self.events.append(("call", id(node)))
        return not (isinstance(node.func, cst.Name) and node.func.value == "print")

    def visit_Name(self, node) -> None:
        self.events.append(("name", id(node)))


def test_visit_only_walks_on_an_indexed_tree_make_the_calls_visit_makes(modules):
    for path, module in modules[::3]:
        with walk.indexed(module):
            for tree in _subtrees(module):
                ours, theirs = _VisitOnly(), _VisitOnly()
                walk.walk(tree, ours)
                tree.visit(theirs)
                assert ours.events == theirs.events, (path, type(tree))


def test_a_node_not_of_the_indexed_tree_is_walked_as_usual():
    """A tree a rule built while the original is indexed (another id, maybe a reused one)."""
    module = cst.parse_module("def f(x):\n    return g(x)\n")
    with walk.indexed(module) as index:
        built = cst.parse_module("def f(x):\n    return g(h(x))\n")
        assert index.span(built.body[0]) is None
        assert [c.func.value for c in walk.findall(built, m.Call())] == ["g", "h"]
        assert [c.func.value for c in walk.findall(module, m.Call())] == ["g"]
