"""Which top-level functions of a module are training steps, read from the source.

The decision is tern's own (``tern/features/training/train_steps.py``, which the rules translate by): a
*step* takes a model M and an optimizer O as parameters and trains M with one
``tf.GradientTape`` and ``O.apply_gradients``; its translation takes a train state where M
was, drops O and returns ``(state, original_return)``, which is what the training replay
calls. A step over several (model, optimizer) pairs (a GAN's generator and critic,
``multi_state_steps.py``) takes a state in each model's place and returns
``(*states, original_return)``. A function that looks like a step but that tern leaves as
written (a nested tape) is found too, with tern's reason: it is reported as not compared
instead of silently ignored.

A *loop* (a threader, ``train_steps.py``: an epoch driver that hands its model and optimizer
to a step and returns, say, a Python history) is replayed the same way, as one call: its
translation takes the state too and returns ``(state, what it returned)``. Its parameters
used only as the iterable of a ``for`` (a dataset of batches) are listed in ``iterated``: the
recorder hands the translation the batches each pass gave the original (``passes.py``). A
loop that makes its optimizer itself (``optimizer = make_optimizer()``, ``builds``) gets a
state whose optimizer it replaces (``state.with_optimizer``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from tern.features.training.step_syntax import SEVERAL_OPTIMIZERS
from tern.features.training.train_steps import analyse, step_refusal


@dataclass(frozen=True)
class Step:
    name: str
    params: tuple[str, ...]  # the function's parameters, in order (``*args``/``**kw`` as ``*name``/``**name``)
    model: str = ""
    optimizer: str = ""
    unsupported: str = ""  # why tern leaves it as written ("" when it translates it)
    #: every (model, optimizer) parameter pair, in the order of the translated step's states
    pairs: tuple[tuple[str, str], ...] = ()
    #: the step calls a ``*.random.*`` sampler, itself or through the module's functions it calls
    draws: bool = False
    #: a loop around steps (an epoch driver), replayed as one call, not per step
    loop: bool = False
    #: parameters read only as the iterable of a ``for`` loop or comprehension
    iterated: tuple[str, ...] = ()
    #: a loop that makes its optimizer itself (``optimizer`` is a local, not a parameter)
    builds: bool = False


def _params(fn: ast.FunctionDef) -> tuple[str, ...]:
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    names += [p.arg for p in a.kwonlyargs]
    if a.kwarg:
        names.append("**" + a.kwarg.arg)
    return tuple(names)


def find_steps(source: str) -> list[Step]:
    """The module's step functions (and step-like functions tern does not translate)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    steps = []
    functions = [fn for fn in tree.body if isinstance(fn, ast.FunctionDef)]
    sigs, refusals = analyse(functions)
    for fn in functions:
        sig, refusal = step_refusal(fn)
        multi = sigs.get(fn.name)
        if multi is not None and multi.pairs and multi.kind == "step":
            steps.append(Step(fn.name, _params(fn), multi.model, multi.optimizer or "", pairs=multi.pairs,
                              draws=_draws(fn, functions)))
        elif sig is not None and sig.kind == "step":
            steps.append(Step(fn.name, _params(fn), sig.model, sig.optimizer or "", pairs=((sig.model, sig.optimizer or ""),),
                              draws=_draws(fn, functions)))
        elif multi is not None and multi.kind == "threader" and not (multi.checkpoints or multi.returns):
            pairs = multi.pairs or ((multi.model, multi.optimizer or ""),)
            steps.append(Step(fn.name, _params(fn), pairs[0][0], pairs[0][1], pairs=pairs, draws=_draws(fn, functions),
                              loop=True, iterated=_iterated(fn), builds=multi.builds))
        elif refusal:
            if refusal == SEVERAL_OPTIMIZERS and fn.name not in sigs:
                refusal = refusals.get(fn.name, refusal)
            steps.append(Step(fn.name, _params(fn), unsupported=f"tern leaves this step as written: {refusal}"))
    return steps



def _draws(fn: ast.FunctionDef, functions: list[ast.FunctionDef]) -> bool:
    """Whether ``fn`` or a module function it calls (transitively) calls ``<x>.random.<y>``."""
    by_name = {f.name: f for f in functions}
    todo, seen = [fn], {fn.name}
    while todo:
        for node in ast.walk(todo.pop()):
            if not isinstance(node, ast.Call):
                continue
            called = ast.unparse(node.func)
            if ".random." in f".{called}":
                return True
            if isinstance(node.func, ast.Name) and node.func.id in by_name and node.func.id not in seen:
                seen.add(node.func.id)
                todo.append(by_name[node.func.id])
    return False


def _iterated(fn: ast.FunctionDef) -> tuple[str, ...]:
    """The parameters whose every read is the iterable of a ``for`` or a comprehension."""
    iterables = {id(node.iter) for node in ast.walk(fn) if isinstance(node, (ast.For, ast.comprehension))}
    reads: dict[str, list[bool]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name):
            reads.setdefault(node.id, []).append(id(node) in iterables and isinstance(node.ctx, ast.Load))
    return tuple(p for p in _params(fn) if reads.get(p) and all(reads[p]))
