"""Which top-level functions of a module are training steps, read from the source.

The decision is tern's own (``tern/features/training/train_steps.py``, which the rules translate by): a
*step* takes a model M and an optimizer O as parameters and trains M with one
``tf.GradientTape`` and ``O.apply_gradients``; its translation takes a train state where M
was, drops O and returns ``(state, original_return)``, which is what the training replay
calls. A function that looks like a step but that tern leaves as written (a GAN's two
optimizers, a nested tape) is found too, with tern's reason: it is reported as not
compared instead of silently ignored.
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
            steps.append(Step(fn.name, _params(fn), unsupported=_multi_reason(fn)))
        elif sig is not None and sig.kind == "step":
            steps.append(Step(fn.name, _params(fn), sig.model, sig.optimizer or ""))
        elif refusal:
            if refusal == SEVERAL_OPTIMIZERS and fn.name not in sigs:
                refusal = refusals.get(fn.name, refusal)
            steps.append(Step(fn.name, _params(fn), unsupported=f"tern leaves this step as written: {refusal}"))
    return steps


def _multi_reason(fn: ast.FunctionDef) -> str:
    """Why a step over several train states (tern/features/training/multi_state_steps.py) is not replayed."""
    reason = ("a step over several train states (one per optimizer): the training replay runs one-state steps "
              "only (tests/test_multi_state_steps.py compares such a step with Keras over three steps)")
    draws = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and ".random." in f".{ast.unparse(n.func)}."]
    if draws:
        reason += ("; and it draws from tf.random, which Keras takes from its global generator and the "
                   "translation from the states' keys, so the two never see the same numbers")
    return reason
