"""What the training feature learns about a package, and the keys of draws in its steps."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

import libcst as cst

from tern.engine.ast_walks import walk as ast_walk
from tern.engine.features import Feature
from tern.engine.names import may_name
from tern.engine.results import Refusal
from tern.features.training.compiled_models import ModelFacts, analyse as analyse_models, scan_module as scan_models
from tern.features.training.multi_state_steps import draw_state
from tern.features.training.step_syntax import TrainSig
from tern.features.training.train_steps import analyse


@dataclass
class TrainingFacts:
    #: training steps and the functions that pass their state along (``train_steps.py``)
    steps: dict[str, TrainSig] = field(default_factory=dict)
    #: function name -> why its training step (or its state passing) is not translated
    refusals: dict[str, str] = field(default_factory=dict)
    #: which names hold compiled Keras models, and what keeps their fit from the trainer (``compiled_models.py``)
    models: ModelFacts = field(default_factory=ModelFacts)
    #: top-level functions that return a Keras optimizer they build (``return keras.optimizers.Adam(...)``)
    optimizer_factories: set[str] = field(default_factory=set)
    #: functions returning a tuple of optimizers they build, with its length
    optimizer_tuple_factories: dict[str, int] = field(default_factory=dict)


class Training(Feature):
    facts = TrainingFacts
    order = 10  # its steps are not plain functions: decided before draws are closed over

    def scan(self, info, tree: ast.Module, module: str, is_test: bool, source: str) -> None:
        facts = info.fact(TrainingFacts)
        scan_models(tree, module, is_test, facts.models, source)
        if is_test or not may_name(source, ("optimizers",)):  # what ``_is_optimizer_call`` looks for
            return
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            if _returns_optimizer(node):
                facts.optimizer_factories.add(node.name)
            elif _optimizer_tuple_size(node):
                facts.optimizer_tuple_factories[node.name] = _optimizer_tuple_size(node)

    def close(self, info) -> None:
        facts = info.fact(TrainingFacts)
        facts.steps, facts.refusals = analyse(info.functions)
        analyse_models(facts.models, info.factories, set(info.classes))

    def claimed_functions(self, info) -> set[str]:
        return set(info.fact(TrainingFacts).steps)

    def draw_key(self, ctx, frame) -> cst.BaseExpression | Refusal | None:
        """The key of a draw in a function that takes a train state: ``state.draw_key(site)``
        (support/KerasTrainState.py), where the state's step changes between any two draws
        at the same site; else a refusal (the draw would repeat its numbers)."""
        sig = ctx.package.fact(TrainingFacts).steps.get(frame.name)
        if sig is None:
            return None
        if frame.repeated:
            return Refusal("a draw inside a lambda or comprehension would take the same key every time; "
                           "write a loop around a training call, or pass keys explicitly")
        loop = frame.loops[-1] if frame.loops else None
        if sig.pairs and sig.kind == "step":
            state = draw_state(sig, frame.tapes_seen, frame.tapes[-1] if frame.tapes else None, tuple(frame.loops))
        else:
            state = sig.states[0][0]
            if loop is not None and loop not in sig.advancing:
                state = None
        if state is None:
            return Refusal("a draw in a loop where no training step advances the train state: every iteration "
                           "would take the same key; split keys with jax.random.split and pass them in")
        site = f"{frame.name}:{frame.draws}"
        frame.draws += 1
        return cst.parse_expression(f'{state}.draw_key("{site}")')


def _is_optimizer_call(node) -> bool:
    """``tf.keras.optimizers.Adam(...)``, ``keras.optimizers.SGD(...)``, ``optimizers.AdamW(...)``: not a schedule."""
    if not isinstance(node, ast.Call):
        return False
    parts = _dotted(node.func).split(".")
    return "optimizers" in parts[:-1] and "schedules" not in parts


def _returns_optimizer(fn: ast.FunctionDef, size: int | None = None) -> bool:
    """Every ``return`` of ``fn`` gives a Keras optimizer built there (directly or through one name),
    or, with ``size``, a tuple of ``size`` of them (a GAN's ``return g_opt, d_opt``)."""
    own = [n for n in ast_walk(fn) if isinstance(n, ast.Return)]
    built = {t.id for n in ast_walk(fn) if isinstance(n, ast.Assign) and _is_optimizer_call(n.value)
             for t in n.targets if isinstance(t, ast.Name)}
    rebound = {t.id for n in ast_walk(fn) if isinstance(n, ast.Assign) and not _is_optimizer_call(n.value)
               for t in n.targets if isinstance(t, ast.Name)}

    def optimizer(value) -> bool:
        return _is_optimizer_call(value) or (isinstance(value, ast.Name) and value.id in built and value.id not in rebound)

    if size is None:
        return bool(own) and all(optimizer(r.value) for r in own)
    return bool(own) and all(isinstance(r.value, ast.Tuple) and len(r.value.elts) == size
                             and all(optimizer(e) for e in r.value.elts) for r in own)


def _optimizer_tuple_size(fn: ast.FunctionDef) -> int | None:
    """``n`` when every ``return`` of ``fn`` gives a tuple of ``n`` optimizers built there."""
    sizes = {len(n.value.elts) for n in ast_walk(fn) if isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple)}
    return next((size for size in sizes if len(sizes) == 1 and _returns_optimizer(fn, size)), None)


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return node.id if isinstance(node, ast.Name) else ""


FEATURE = Training()
