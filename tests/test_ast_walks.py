"""``tern.engine.ast_walks`` against the stdlib, on real code: the fixtures and a sample of
the installed Keras sources, plus hand-made nodes. A compiled child lister that skipped,
added or reordered a child would change the pre-pass and translations silently."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from keras_sources import keras_sample
from tern.engine.ast_walks import SCOPES, children, kept_walks, own_nodes, walk

ROOT = Path(__file__).resolve().parents[1]
KERAS_SAMPLE = 40


def _trees() -> list[tuple[str, ast.Module]]:
    out = []
    for path in sorted((ROOT / "fixtures" / "tf").rglob("*.py")) + keras_sample(KERAS_SAMPLE):
        try:
            out.append((str(path), ast.parse(path.read_text(encoding="utf-8"))))
        except (SyntaxError, UnicodeDecodeError):
            continue
    return out


HAND_MADE = textwrap.dedent('''
    @decorate
    @decorate.with_args(1, key=None)
    def f(a, /, b=1, *args, c, d=None, e, **kw) -> int:
        global g, h
        def inner():
            nonlocal a
            a: int = 1
        x = {**a, "k": 1, **b}
        y = f"{a!r:>{b}} and {c=} {{literal}}"
        match x:
            case Point(1, 2, x=3, y=[_, *rest]) | {"k": v, **others} if v:
                pass
            case str() as s:
                pass
        lambda p, *, q=None, r=2: (yield from p)
        return [z async for z in w if z]
    class C(Base, metaclass=Meta):
        """doc"""
        async def m(self, *, k=None, j):
            async with a as (b, c), d:
                await e
            try:
                pass
            except* (E, F) as err:
                raise X from err
            finally:
                del self.x[1:2, ::3]
''')


def _same(got: list, want: list) -> bool:
    return len(got) == len(want) and all(a is b for a, b in zip(got, want))


def _reference_own_nodes(fn: ast.AST):
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, SCOPES):
            todo.extend(ast.iter_child_nodes(node))


@pytest.fixture(scope="module")
def trees() -> list[tuple[str, ast.Module]]:
    found = _trees() + [("hand-made", ast.parse(HAND_MADE))]
    assert len(found) > 20
    return found


def test_children_are_iter_child_nodes(trees):
    for name, tree in trees:
        for node in ast.walk(tree):
            assert _same(children(node), list(ast.iter_child_nodes(node))), (name, ast.dump(node)[:200])


def test_walk_is_ast_walk(trees):
    for name, tree in trees:
        assert _same(list(walk(tree)), list(ast.walk(tree))), name
        with kept_walks():
            assert _same(list(walk(tree)), list(ast.walk(tree))), name
            assert _same(list(walk(tree)), list(ast.walk(tree))), name  # the kept walk


def test_own_nodes_are_the_stack_walk(trees):
    for name, tree in trees:
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                want = list(_reference_own_nodes(fn))
                assert _same(list(own_nodes(fn)), want), (name, fn.name)
                with kept_walks():
                    assert _same(list(own_nodes(fn)), want), (name, fn.name)


def test_hand_made_nodes_cover_the_odd_fields():
    tree = ast.parse(HAND_MADE)
    seen = {type(n) for n in ast.walk(tree)}
    assert {ast.Global, ast.Nonlocal, ast.MatchClass, ast.MatchMapping, ast.JoinedStr, ast.FormattedValue,
            ast.TryStar, ast.Dict, ast.Lambda, ast.YieldFrom} <= seen
    dict_node = next(n for n in ast.walk(tree) if isinstance(n, ast.Dict))
    assert dict_node.keys.count(None) == 2 and len(children(dict_node)) == 4  # {**a}: a None key, skipped
    fn = tree.body[0]
    args = fn.args
    assert args.kw_defaults[0] is None and args.kw_defaults[2] is None  # c and e have none
    assert _same(children(args), [*args.posonlyargs, *args.args, args.vararg, *args.kwonlyargs, args.kw_defaults[1],
                                  args.kwarg, *args.defaults])
    assert _same(children(fn), [fn.args, *fn.body, *fn.decorator_list, fn.returns])  # the name is a string
    assert isinstance(fn.body[0], ast.Global) and children(fn.body[0]) == []  # so are Global.names


def test_built_nodes_with_missing_or_odd_fields():
    name = ast.Name("a", ast.Load())
    odd = ast.BinOp(left=[name, "not a node", None, ast.Constant(1)], op=ast.Add(), right="text")
    missing = ast.BinOp(left=name)  # no op, no right
    bare = ast.Name()  # no fields at all
    global_with_node = ast.Global(names=["g", name])

    class Custom(ast.AST):
        _fields = ("first", "second", "not-an-identifier")

    custom = Custom()
    custom.first, custom.second = name, [name, 1]
    setattr(custom, "not-an-identifier", ast.Pass())
    for node in (odd, missing, bare, global_with_node, custom, ast.Module(body=[ast.Expr(odd)], type_ignores=[])):
        assert _same(children(node), list(ast.iter_child_nodes(node))), ast.dump(node)
        assert _same(list(walk(node)), list(ast.walk(node))), ast.dump(node)
