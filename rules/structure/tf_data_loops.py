"""``for batch in dataset`` iterates NumPy batches: jax.jit refuses TF EagerTensors.

A tf.data dataset yields EagerTensors, and ``jax.jit`` rejects them as arguments ("not a
valid JAX type"). A loop (or comprehension) over a dataset iterates the allowance's
``bridge`` instead, ``as_numpy_batches(dataset)``: ``.as_numpy_iterator()`` when the object
has one, the object itself otherwise, so it is exact whatever the loop is given. That
makes it safe where tern cannot know: a loop over a function parameter in package code of
a package that uses tf.data (a caller may pass a dataset, a test a list of arrays), when
what it yields is passed to a call (a batch going somewhere; ``[2 * s for s in sizes]`` is
left alone). Everywhere, tests included, loops over a dataset tern can see (a tf.data
chain, a local assigned one, a package function that returns one). Loops in Keras-class
methods (Flax modules) and in functions tf.data itself runs are left alone.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.dispatch import CachedHooks
from tern.engine.results import code
from tern.engine.rule import Rule
from tern.engine.templates import expand_template
from tern.engine.walk import findall, walk
from tern.engine.transform import transform
from tern.features.tf_data.datasets import FileDatasets, parse_expression


def _params(fn: cst.FunctionDef) -> set[str]:
    p = fn.params
    names = {x.name.value for x in (*p.posonly_params, *p.params, *p.kwonly_params)}
    names |= {x.name.value for x in (p.star_arg, p.star_kwarg) if isinstance(x, cst.Param)}
    return names - {"self", "cls"}


class _Passed(cst.CSTVisitor):
    """Names passed as (part of) an argument to some call."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Arg(self, node: cst.Arg) -> None:
        for name in _names(node.value):
            self.names.add(name)


def _names(node: cst.CSTNode) -> set[str]:
    return {name.value for name in findall(node, m.Name())}


def _feeds_a_call(target: cst.BaseExpression, *body: cst.CSTNode) -> bool:
    passed = _Passed()
    for node in body:
        walk(node, passed)
    return bool(_names(target) & passed.names)


class _OwnLoops(cst.CSTVisitor):
    """The loops ``_Bridge`` visits: those of one function, not of the functions, classes and
    lambdas inside it (those were bridged when they were left)."""

    def __init__(self):
        self.found: list[cst.For | cst.CompFor] = []

    def visit_FunctionDef(self, node) -> bool:
        return False

    def visit_ClassDef(self, node) -> bool:
        return False

    def visit_Lambda(self, node) -> bool:
        return False

    def visit_For(self, node) -> None:
        self.found.append(node)

    def visit_CompFor(self, node) -> None:
        self.found.append(node)


def _own_loops(body: cst.CSTNode) -> list[cst.For | cst.CompFor]:
    loops = _OwnLoops()
    walk(body, loops)
    return loops.found


def _maybe_dataset(judge, iterable: cst.BaseExpression) -> bool:
    """Whether the judge sees a dataset at the root of ``iterable`` (a parameter may still be left alone)."""
    tree = parse_expression(code(iterable))
    return tree is not None and judge.root(tree) is not None


class _Bridge(CachedHooks):
    """Wraps the iterable of each loop of one function body that the judge calls a dataset
    (a parameter only when what the loop yields is passed to a call)."""

    def __init__(self, ctx, judge, template: str):
        self.ctx, self.judge, self.template = ctx, judge, template
        self.changed = False
        self._uses: list[tuple[cst.CSTNode, ...]] = []

    def visit_FunctionDef(self, node) -> bool:
        return False  # nested functions were bridged when they were left

    def visit_ClassDef(self, node) -> bool:
        return False

    def visit_Lambda(self, node) -> bool:
        return False

    def _bridged(self, target, iterable: cst.BaseExpression, *uses: cst.CSTNode) -> cst.BaseExpression | None:
        if not _maybe_dataset(self.judge, iterable):
            return None
        if isinstance(iterable, cst.Name) and iterable.value in self.judge.params \
                and iterable.value not in self.judge.local and not _feeds_a_call(target, *uses):
            return None
        out = expand_template(self.template, {"iterable": iterable}, self.ctx)
        if not isinstance(out, cst.BaseExpression):
            return None
        self.changed = True
        return out

    def leave_For(self, original, updated):
        out = self._bridged(updated.target, updated.iter, updated.body)
        return updated if out is None else updated.with_changes(iter=out)

    def visit_ListComp(self, node) -> None:
        self._uses.append((node.elt,))

    visit_SetComp = visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node) -> None:
        self._uses.append((node.key, node.value))

    def leave_ListComp(self, original, updated):
        self._uses.pop()
        return updated

    leave_SetComp = leave_GeneratorExp = leave_DictComp = leave_ListComp

    def leave_CompFor(self, original, updated):
        conditions = [c.test for c in updated.ifs]
        inner = [updated.inner_for_in] if updated.inner_for_in is not None else []
        out = self._bridged(updated.target, updated.iter, *self._uses[-1], *conditions, *inner)
        return updated if out is None else updated.with_changes(iter=out)


class TfDataLoopsRule(Rule):
    id = "structure:tf-data-loops"
    order = 90  # after the rules that restructure functions: it only wraps iterables

    def leave_function(self, ctx, original, updated):
        facts = ctx.file_fact(FileDatasets)
        frame = ctx.frame
        if facts is None or not facts.record.bridge or frame is None or frame.in_module_method:
            return None
        loops = _own_loops(updated.body)
        judge = facts.judge(original.name.value, set() if ctx.is_test else _params(original))
        if not any(_maybe_dataset(judge, loop.iter) for loop in loops):
            return None  # the bridge wraps datasets' loops only: none here, the body is not rebuilt
        bridge = _Bridge(ctx, judge, facts.record.bridge)
        body = transform(updated.body, bridge)
        return updated.with_changes(body=body) if bridge.changed else None


RULE = TfDataLoopsRule()
