"""Which package names hold Keras models that ``compile`` / ``fit`` / ``evaluate`` / ``predict`` reach.

Keras keeps a model's compiled loss, metrics and optimizer, and its variables, on the model
object: ``compile_classifier(model)`` in one module and ``train(model, ...)`` in another act
on the caller's object. The translation attaches a ``KerasTrainer`` to the Flax module
object (``rules/support/KerasTrainer.py``), so those calls are rewritten only where the
receiver is known to be a model, decided package-wide and once, here, on Python's ``ast``:

- a name bound (in the same scope) to a model: a package Keras class, a package model
  factory, ``keras.Sequential`` / ``keras.Model``, or a package function that returns the
  model it is given (``compile_classifier(build_classifier())``);
- a parameter that every call in the package (tests included; at least one call) passes a
  model by these same rules, a caller's own such parameter included.

A ``fit`` on a model whose sources (the classes and functions it came through) change what
Keras' fit does in a way the trainer cannot reproduce is refused, with the reason: layers
frozen with ``trainable = False`` inside a class (a package function's freezing reaches the
trainer through the module's ``KerasTrainable`` table), ``train_step``/``test_step`` overrides that
``tern/features/training/step_overrides.py`` does not translate (those it translates the trainer runs). (Regularization
losses are not among them: translated modules sow them into the ``losses`` collection, which
the trainer adds to the loss as Keras adds ``model.losses``.) The rewrites live in
``tern/features/training/trainer_calls.py`` and the two rules that use it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Callable

from tern.engine.ast_walks import own_nodes, walk as ast_walk
from tern.engine.names import ast_tail, may_name
from tern.features.training.step_overrides import ClassSteps, analyse_class

#: methods and attributes of a Keras model the trainer stands in for
TRAINER_METHODS = frozenset({
    "compile", "fit", "evaluate", "predict", "get_weights", "set_weights", "save_weights", "load_weights",
})
OVERRIDES = ("train_step", "test_step", "predict_step", "compute_loss", "compute_metrics")
INLINE_MODELS = {"Sequential": "keras.Sequential", "Model": "keras.Model"}

Sources = frozenset  # names of the package classes/functions (or keras.Sequential) a model came from


@dataclass
class ModelFacts:
    """What the package says about its compiled models (see the module docstring)."""

    trees: list[tuple[str, ast.Module, bool]] = field(default_factory=list, repr=False)
    #: package function -> its positional parameters (to find an argument in a call)
    params: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: function -> the parameter it returns (``return model``)
    returns_model: dict[str, str] = field(default_factory=dict)
    #: top-level function ("" for module level) -> receiver name -> its sources, or why unknown
    receivers: dict[str, dict[str, Sources | str]] = field(default_factory=dict)
    #: function -> parameters that only ever receive models, with their sources
    model_params: dict[str, dict[str, Sources]] = field(default_factory=dict)
    #: function -> parameters it uses as a Keras model (directly or by handing them on)
    keras_params: dict[str, frozenset[str]] = field(default_factory=dict)
    #: class -> the Keras training methods it overrides
    overrides: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: class -> which of its overrides are translated, and why the others are not (``tern/features/training/step_overrides.py``)
    steps: dict[str, ClassSteps] = field(default_factory=dict)
    #: classes that set a ``trainable`` flag (package functions that do set the module's KerasTrainable table)
    freezing: set[str] = field(default_factory=set)


def scan_module(tree: ast.Module, module: str, is_test: bool, facts: ModelFacts, source: str | None = None) -> None:
    """Per-module facts (the call-site analysis waits for every module: ``analyse``).
    ``source``: the module's text, when known (a class not naming ``trainable`` is not walked for it)."""
    facts.trees.append((module, tree, is_test))
    may_freeze = source is None or may_name(source, ("trainable",))
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in OVERRIDES:
                    facts.overrides[node.name] = (*facts.overrides.get(node.name, ()), item.name)
            if node.name in facts.overrides:
                facts.steps[node.name] = analyse_class(node)
        if may_freeze and isinstance(node, ast.ClassDef):  # a function's flags: rules/structure/frozen_layers.py, which the trainer reads
            for inner in ast_walk(node):
                if isinstance(inner, (ast.Assign, ast.AugAssign)) and any(
                        isinstance(t, ast.Attribute) and t.attr == "trainable"
                        for t in (inner.targets if isinstance(inner, ast.Assign) else [inner.target])):
                    facts.freezing.add(node.name)


def override_refusal(facts: ModelFacts, cls: str, method: str) -> str | None:
    """Why ``model.<method>(...)`` cannot run on the trainer, given ``cls``'s overrides (None: it can).

    ``fit`` runs a translated ``train_step``, ``evaluate`` a translated ``test_step``; the
    trainer's default steps stand in for Keras' only where no override changes what they
    call (``compute_loss``, ``compute_metrics``) or report (a class with its own steps has
    its own ``metrics``). ``compile`` is refused when both ``fit`` and ``evaluate`` are.
    """
    if method == "compile":
        fit, evaluate = override_refusal(facts, cls, "fit"), override_refusal(facts, cls, "evaluate")
        return fit if fit and evaluate else None
    steps = facts.steps.get(cls, ClassSteps())
    overridden = set(facts.overrides.get(cls, ()))
    own = {"fit": "train_step", "evaluate": "test_step", "predict": "predict_step"}.get(method)
    if own is None:
        return None
    if own in overridden:
        if own in steps.plans:
            return None
        why = steps.refusals.get(own, "not translated yet")
        return f"`{cls}` overrides `{own}`, which Keras' {method} runs instead of its default step: {why}"
    changed = sorted(overridden & {"compute_loss", "compute_metrics", "train_step", "test_step"}) if method != "predict" else []
    if changed:
        what = ", ".join(f"`{m}`" for m in changed)
        return (f"`{cls}` overrides {what} but not `{own}`: Keras' default `{own}` then reports the class's own "
                "`metrics` and loss methods, which the trainer's default step does not: not translated yet")
    return None


def refusal(facts: ModelFacts, sources: Sources, reaches, method: str) -> str | None:
    """Why ``model.<method>(...)`` on a model from ``sources`` cannot use the trainer, if it cannot.

    ``reaches(name, targets)`` is the package's call graph (``PackageInfo.reaches``).
    """
    names = sorted(sources)

    def hit(targets) -> str | None:
        targets = frozenset(targets)
        return next((n for n in names if n in targets or reaches(n, targets)), None)

    overriding = {c: why for c in facts.overrides if (why := override_refusal(facts, c, method)) is not None}
    owner = hit(overriding)
    if owner is not None:
        cls = owner if owner in overriding else next(c for c in sorted(overriding) if reaches(owner, frozenset({c})))
        return overriding[cls]
    owner = hit(facts.freezing) if method in ("compile", "fit") else None
    if owner is not None:
        return (f"`{owner}` sets `trainable` on its own layers, which Keras' fit leaves untouched; only flags set "
                "on a model's layers by package functions reach the trainer (KerasTrainable): not translated yet")
    return None


# -- the call-site analysis --------------------------------------------------------


def _params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]


def _key(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return "self." + node.attr
    return None


@dataclass
class _Scope:
    """Where an expression is evaluated: its function (None at module or class level), the
    top-level function it belongs to, its class and module.

    ``assigned`` (what each name and ``self.x`` is assigned in the scope, its class' other
    methods' ``self.x`` after its own) is worked out when first asked: most scopes of a
    package are never asked about (a tenth of the package pre-pass went to working them all out)."""

    fn: ast.FunctionDef | None
    top: str | None
    cls: ast.ClassDef | None
    tree: ast.Module
    nodes: list[ast.AST] = field(default_factory=list, repr=False)
    #: the ``self.x`` assignments of the scope's class, all methods together (None: no class)
    attributes: Callable[[], dict[str, list[ast.expr]]] | None = field(default=None, repr=False)
    _assigned: dict[str, list[ast.expr]] | None = field(default=None, repr=False)

    @property
    def assigned(self) -> dict[str, list[ast.expr]]:
        if self._assigned is None:
            assigned = dict(_assignments(self.nodes))
            for key, values in (self.attributes() if self.attributes is not None else {}).items():
                assigned.setdefault(key, values)
            self._assigned = assigned
        return self._assigned


class _ClassAttributes:
    """What a class' methods assign to ``self.x``, all methods together, worked out when first
    asked (a method sees what any method sets on self)."""

    def __init__(self, methods: list[ast.FunctionDef]):
        self.methods = methods
        self._found: dict[str, list[ast.expr]] | None = None

    def __call__(self) -> dict[str, list[ast.expr]]:
        if self._found is None:
            found: dict[str, list[ast.expr]] = {}
            for method in self.methods:
                for key, values in _assignments(own_nodes(method)).items():
                    if key.startswith("self."):
                        found.setdefault(key, []).extend(values)
            self._found = found
        return self._found


_TARGETED = frozenset({ast.AugAssign, ast.AnnAssign, ast.For, ast.With, ast.NamedExpr})


def _assignments(nodes) -> dict[str, list[ast.expr]]:
    out: dict[str, list[ast.expr]] = {}
    for node in nodes:
        kind = node.__class__  # parsed trees hold ast's own classes: no subclass to miss
        if kind is ast.Assign:
            for target in node.targets:
                key = _key(target)
                if key is not None:
                    out.setdefault(key, []).append(node.value)
                elif isinstance(target, (ast.Tuple, ast.List)):
                    for elt in ast_walk(target):
                        key = _key(elt) if isinstance(elt, (ast.Name, ast.Attribute)) else None
                        if key is not None:
                            out.setdefault(key, []).append(None)  # unpacked: unknown value
        elif kind in _TARGETED:
            targets = [node.target] if not isinstance(node, ast.With) else [i.optional_vars for i in node.items if i.optional_vars]
            for target in targets:
                for elt in ast_walk(target):
                    key = _key(elt) if isinstance(elt, (ast.Name, ast.Attribute)) else None
                    if key is not None:
                        value = node.value if isinstance(node, ast.AnnAssign) and node.value is not None else None
                        out.setdefault(key, []).append(value)
    return out


class _Analysis:
    def __init__(self, facts: ModelFacts, factories: set[str], classes: set[str]):
        self.facts = facts
        self.makers = set(factories) | set(classes)
        self.functions: dict[str, ast.FunctionDef] = {}
        self.sites: dict[str, list[tuple[ast.Call, _Scope]]] = {}
        self.scopes: list[_Scope] = []
        for _, tree, is_test in facts.trees:
            if not is_test:
                for node in tree.body:
                    if isinstance(node, ast.FunctionDef):
                        self.functions.setdefault(node.name, node)
        for _, tree, _ in facts.trees:
            self._collect(tree)

    def _collect(self, tree: ast.Module) -> None:
        self._scope(_Scope(None, "", None, tree, list(own_nodes(tree))))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self._function(node, node.name, None, tree)
            elif isinstance(node, ast.ClassDef):
                attributes = _ClassAttributes([item for item in node.body if isinstance(item, ast.FunctionDef)])
                for item in attributes.methods:
                    self._function(item, None, node, tree, attributes)

    def _function(self, fn, top, cls, tree, attributes: _ClassAttributes | None = None) -> None:
        scope = _Scope(fn, top, cls, tree, list(own_nodes(fn)), attributes)
        self._scope(scope)
        for node in scope.nodes:
            if isinstance(node, ast.FunctionDef):
                self._function(node, None, cls, tree, attributes)

    def _scope(self, scope: _Scope) -> None:
        self.scopes.append(scope)
        for node in scope.nodes:
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.functions:
                self.sites.setdefault(node.func.id, []).append((node, scope))  # a method of the same name is not it

    # -- what an expression is ------------------------------------------------------

    def sources(self, expr: ast.expr | None, scope: _Scope, depth: int = 0) -> Sources | None:
        if expr is None or depth > 8:
            return None
        if isinstance(expr, ast.Call):
            tail = ast_tail(expr.func)
            if tail in self.makers:
                return frozenset({tail})
            if tail in INLINE_MODELS:
                return frozenset({INLINE_MODELS[tail]})
            param = self.facts.returns_model.get(tail) if isinstance(expr.func, ast.Name) else None
            if param is not None:
                inner = self.sources(_arg_at(expr, self.functions[tail], param), scope, depth + 1)
                return None if inner is None else inner | {tail}
            return None
        key = _key(expr)
        if key is None:
            return None
        values = scope.assigned.get(key)
        if values:
            out = frozenset()
            for value in values:
                got = self.sources(value, scope, depth + 1)
                if got is None:
                    return None
                out |= got
            return out
        if scope.fn is not None and scope.top is not None and key in _params(scope.fn):
            return self.facts.model_params.get(scope.top, {}).get(key)
        return None

    # -- the package-wide facts -----------------------------------------------------

    def returns_model(self) -> None:
        for name, fn in self.functions.items():
            returns = [n for n in own_nodes(fn) if isinstance(n, ast.Return)]
            names = {r.value.id for r in returns if isinstance(r.value, ast.Name)}
            if returns and len(names) == 1 and len(returns) == sum(isinstance(r.value, ast.Name) for r in returns):
                param = next(iter(names))
                if param in _params(fn):
                    self.facts.returns_model[name] = param

    @staticmethod
    def _receiver_uses(fn, name: str):
        for node in own_nodes(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == name \
                    and (node.attr in TRAINER_METHODS or node.attr == "optimizer"):
                yield node

    def model_params(self) -> None:
        for _ in range(len(self.functions) + 2):
            changed = False
            for name, fn in self.functions.items():
                for param in _params(fn):
                    got = self._param_sources(name, fn, param)
                    if got is not None and self.facts.model_params.get(name, {}).get(param) != got:
                        self.facts.model_params.setdefault(name, {})[param] = got
                        changed = True
            if not changed:
                return

    def _param_sources(self, name: str, fn, param: str) -> Sources | None:
        sites = self.sites.get(name, [])
        if not sites:
            return None
        out = frozenset()
        for call, scope in sites:
            got = self.sources(_arg_at(call, fn, param), scope)
            if got is None:
                return None
            out |= got
        return out

    def keras_params(self) -> None:
        direct = {name: frozenset(p for p in _params(fn) if any(self._receiver_uses(fn, p)))
                  for name, fn in self.functions.items()}
        out = {k: v for k, v in direct.items() if v}
        changed = True
        while changed:
            changed = False
            for name, fn in self.functions.items():
                for node in own_nodes(fn):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in out:
                        callee = self.functions[node.func.id]
                        for param in out[node.func.id]:
                            arg = _arg_at(node, callee, param)
                            if isinstance(arg, ast.Name) and arg.id in _params(fn) and arg.id not in out.get(name, ()):
                                out[name] = out.get(name, frozenset()) | {arg.id}
                                changed = True
        self.facts.keras_params = out

    def receivers(self) -> None:
        for scope in self.scopes:
            if scope.top is None or any(is_test for _, t, is_test in self.facts.trees if t is scope.tree):
                continue
            found = {}
            for node in scope.nodes:
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                        and (node.attr in TRAINER_METHODS or node.attr == "optimizer") and node.value.id not in found \
                        and not _train_state_predict(node, scope):
                    got = self.sources(node.value, scope)
                    found[node.value.id] = got if got is not None else self._why_unknown(node.value.id, scope)
            if found:
                self.facts.receivers.setdefault(scope.top, {}).update(found)

    def _why_unknown(self, name: str, scope: _Scope) -> str:
        if scope.fn is not None and name in _params(scope.fn) and name not in scope.assigned:
            sites = self.sites.get(scope.top, [])
            if not sites:
                return f"no call in the package passes `{name}` a model tern knows"
            for call, site in sites:
                arg = _arg_at(call, scope.fn, name)
                if self.sources(arg, site) is None:
                    shown = ast.unparse(arg) if arg is not None else "(its default)"
                    return f"a caller passes `{shown[:40]}` as `{name}`, which tern cannot tell is a Keras model"
        return f"tern cannot tell that `{name}` holds a Keras model"


def _arg_at(call: ast.Call, fn: ast.FunctionDef, param: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == param:
            return kw.value
    positional = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if param in positional:
        index = positional.index(param)
        if index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:index + 1]):
            return call.args[index]
    return None


def analyse(facts: ModelFacts, factories: set[str], classes: set[str]) -> ModelFacts:
    """Fill in the package-wide facts once every module was scanned."""
    if not facts.trees:
        return facts  # analysed already (the trees are dropped afterwards), or nothing scanned
    analysis = _Analysis(facts, factories, classes)
    facts.params = {name: tuple(a.arg for a in (*fn.args.posonlyargs, *fn.args.args))
                    for name, fn in analysis.functions.items()}
    analysis.returns_model()
    analysis.model_params()
    analysis.keras_params()
    analysis.receivers()
    facts.trees = []  # the trees served the analysis; the rules read its results (and workers get them pickled)
    return facts


def _train_state_predict(node: ast.Attribute, scope) -> bool:
    """``state.predict`` on a parameter named ``state`` / ``<model>_state``: the train state tern's
    own translation passes (support/KerasTrainState.py), met again when a translation is rerun."""
    name = node.value.id
    return (node.attr == "predict" and (name == "state" or name.endswith("_state"))
            and scope.fn is not None and name in _params(scope.fn))
