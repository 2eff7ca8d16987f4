"""The shapes the training analysis reads on Python's ``ast``: the signature of a translated
training function, and the small syntactic questions every part of the analysis asks (a
tape, a function's own nodes, a training call's argument, whether a call can be hoisted).

Shared by ``train_steps.py`` (single-state steps), ``multi_state_steps.py``,
``train_checkpoints.py`` and ``step_overrides.py``; it imports none of them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from tern.engine.ast_walks import children as ast_children, own_nodes, walk as ast_walk
from tern.engine.names import ast_tail

#: names the rewritten functions introduce; a function already using one is left alone
INTRODUCED = frozenset({"state", "params", "model_state", "compute_loss"})
TRAINABLE = frozenset({"trainable_variables", "trainable_weights"})
SEVERAL_OPTIMIZERS = ("several apply_gradients in one step, not each `O.apply_gradients(zip(g, M.trainable_variables))` "
                      "after its own tape (see tern/features/training/multi_state_steps.py)")


@dataclass(frozen=True)
class TrainSig:
    """How a translated training function is called: state in ``model``'s place, ``optimizer`` dropped."""

    kind: str  # "step", "threader", "reader" or "checkpointer" (``tern/features/training/train_checkpoints.py``)
    params: tuple[str, ...]
    model: str
    optimizer: str | None = None
    #: a checkpointer's returned values that are checkpoints/managers (``("checkpoint", "manager")``)
    returns: tuple[str | None, ...] = ()
    #: local names bound to a translated checkpoint or manager, with their role
    checkpoints: tuple[tuple[str, str], ...] = ()
    #: a threader that makes its optimizer (``optimizer``, a local) next to the model it is given
    builds: bool = False
    #: several (model, optimizer) pairs, each its own ``<model>_state`` (``tern/features/training/multi_state_steps.py``)
    pairs: tuple[tuple[str, str], ...] = ()
    #: a multi-state step's tapes in source order: (state, indices of the loops around it)
    draws: tuple[tuple[str, tuple[int, ...]], ...] = ()
    #: source-order indices of the loops in which the state advances (a training call or tape inside)
    advancing: frozenset[int] = frozenset()

    @property
    def states(self) -> tuple[tuple[str, str, str | None], ...]:
        """``(state name, model, optimizer)`` per train state the translation takes."""
        if self.pairs:
            return tuple((f"{m}_state", m, o) for m, o in self.pairs)
        return (("state", self.model, self.optimizer),)

    @property
    def updates(self) -> bool:
        return self.kind in ("step", "threader")


def is_tape(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and ast_tail(node.func) == "GradientTape"


def nested_use(fn: ast.FunctionDef, names) -> str | None:
    """A name of ``names`` read inside a nested function or lambda (a rename would miss it)."""
    own = {id(n) for n in own_nodes(fn)}
    for node in ast_walk(fn):
        if isinstance(node, ast.Name) and node.id in names and id(node) not in own:
            return node.id
    return None


def positional(fn: ast.FunctionDef) -> tuple[str, ...] | None:
    if fn.args.vararg or fn.args.kwarg or fn.args.posonlyargs:
        return None
    return tuple(a.arg for a in fn.args.args)


def names_in(nodes) -> set[str]:
    return {n.id for n in nodes if isinstance(n, ast.Name)}


def trainable_of(node: ast.expr, model: str) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in TRAINABLE and ast_tail(node.value) == model and isinstance(node.value, ast.Name)


def arg_at(call: ast.Call, sig: TrainSig, param: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == param:
            return kw.value
    index = sig.params.index(param)
    if index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:index + 1]):
        return call.args[index]
    return None


def passing_calls(fn, sigs: dict[str, TrainSig]):
    for node in own_nodes(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in sigs:
            yield node, sigs[node.func.id]


UNROLLED = "results"  # the list a `return [... for ...]` of training calls is built in


def parent_map(fn: ast.FunctionDef) -> dict[int, ast.AST]:
    return {id(child): node for node in ast_walk(fn) for child in ast_children(node)}


def unrollable(fn: ast.FunctionDef, comp: ast.AST, parent: ast.AST) -> bool:
    """A list comprehension that is a whole statement's value (``xs = [...]``, ``return [...]``),
    with one ``for`` and no ``if``, whose loop names nothing else in ``fn`` uses: it can
    become a ``for`` loop appending to the list, so training calls in its element can rebind
    the state."""
    if not (isinstance(comp, ast.ListComp) and len(comp.generators) == 1 and not comp.generators[0].ifs
            and not comp.generators[0].is_async):
        return False
    if isinstance(parent, ast.Assign):
        if not (parent.value is comp and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)):
            return False
    elif isinstance(parent, ast.Return):
        if UNROLLED in {n.id for n in ast_walk(fn) if isinstance(n, ast.Name)}:
            return False
    else:
        return False
    targets = {n.id for n in ast_walk(comp.generators[0].target) if isinstance(n, ast.Name)}
    inside = {id(n) for n in ast_walk(comp)}
    return not any(isinstance(n, ast.Name) and n.id in targets and id(n) not in inside for n in ast_walk(fn))


def hoist_refusal(fn: ast.FunctionDef, call: ast.Call) -> str | None:
    """Why a training call cannot be hoisted into a statement of its own just before its
    statement (``state, r = step(state, ...)``), if it cannot: it must be evaluated exactly once,
    there, which lambdas, conditional expressions and comprehension elements do not guarantee.
    A comprehension's first iterable is evaluated once where the comprehension stands; a
    statement-level list comprehension (``unrollable``) becomes a loop first."""
    parents = parent_map(fn)
    child, node = call, parents.get(id(call))
    while node is not None and not isinstance(node, ast.stmt):
        if isinstance(node, ast.Lambda):
            return "a training call inside a lambda cannot pass the state on"
        if isinstance(node, (ast.IfExp, ast.BoolOp)):
            return "a training call inside a conditional expression; make it a statement"
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            first_iter = isinstance(child, ast.comprehension) and child is node.generators[0]
            if not first_iter:
                statement = parents.get(id(node))
                if child is getattr(node, "elt", None) and unrollable(fn, node, statement):
                    return None
                return ("a training call inside a comprehension cannot pass the state on (only `xs = [f(...) for x in "
                        "items]` with one for and no if is rewritten); write a loop")
        if isinstance(node, ast.comprehension) and child is not node.iter:
            return "a training call in a comprehension's condition; write a loop"
        child, node = node, parents.get(id(node))
    if isinstance(node, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.Match)):
        return "a training call in the header of an if/for/while/with; assign its result first"
    return None


def is_build(node, model: str, optimizer: str) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr == "build" and ast_tail(node.value.func.value) == optimizer
            and isinstance(node.value.func.value, ast.Name) and len(node.value.args) == 1
            and trainable_of(node.value.args[0], model))


def sig_name(call: ast.Call) -> str:
    return ast_tail(call.func)
