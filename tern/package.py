"""Package pre-pass: which classes are Keras layers/models, which functions build models.

Uses Python's ``ast`` (much faster than LibCST) over every file once, so that each file's
translation knows about classes defined elsewhere in the package (a test importing
``from mypkg.model import MyModel`` must know ``MyModel`` becomes a Flax module).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from tern.compiled_models import ModelFacts, analyse as analyse_models, scan_module as scan_models
from tern.datasets import PackageDatasets, scan_module as scan_datasets
from tern.train_steps import TrainSig, analyse

KERAS_BASES = {"Layer", "Model"}


@dataclass(frozen=True)
class WeightInfo:
    attr: str
    name: str
    collection: str


@dataclass
class ClassInfo:
    name: str
    module: str
    bases: tuple[str, ...]
    weights: dict[str, WeightInfo] = field(default_factory=dict)


@dataclass
class PackageInfo:
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    factories: set[str] = field(default_factory=set)
    #: plain functions that build and call training-dependent layers (graph helpers):
    #: they get a ``training`` parameter, and callers pass theirs on
    training_helpers: set[str] = field(default_factory=set)
    #: every function (any depth) that calls ``Model(...)``/``Sequential(...)``
    model_builders: set[str] = field(default_factory=set)
    #: class or function name -> names it calls (layer classes, package classes, helpers)
    calls: dict[str, set[str]] = field(default_factory=dict)
    #: training steps and the functions that pass their state along (``tern/train_steps.py``)
    train: dict[str, TrainSig] = field(default_factory=dict)
    #: function name -> why its training step (or its state passing) is not translated
    train_refusals: dict[str, str] = field(default_factory=dict)
    #: top-level functions of non-test modules, analysed for training once all are seen
    functions: list[ast.FunctionDef] = field(default_factory=list, repr=False)
    #: which package functions return a tf.data dataset, whether tf.data is used (``tern/datasets.py``)
    datasets: PackageDatasets = field(default_factory=PackageDatasets)
    #: which names hold compiled Keras models, and what keeps their fit from the trainer (``tern/compiled_models.py``)
    models: ModelFacts = field(default_factory=ModelFacts)
    #: top-level functions that return a Keras optimizer they build (``return keras.optimizers.Adam(...)``)
    optimizer_factories: set[str] = field(default_factory=set)

    def reaches(self, name: str, targets: frozenset[str]) -> bool:
        """Whether ``name`` calls any of ``targets``, directly or through package code."""
        seen, todo = set(), [name]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            called = self.calls.get(current, set())
            if called & targets:
                return True
            todo.extend(called)
        return False

    def is_module_class(self, name: str) -> bool:
        return name in self.classes


def _base_tail(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _weights(cls: ast.ClassDef) -> dict[str, WeightInfo]:
    out: dict[str, WeightInfo] = {}
    for node in ast.walk(cls):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if not (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
            and isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "add_weight"
        ):
            continue
        name = target.attr
        trainable = True
        for kw in value.keywords:
            if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                name = str(kw.value.value)
            if kw.arg == "trainable" and isinstance(kw.value, ast.Constant):
                trainable = bool(kw.value.value)
        out[target.attr] = WeightInfo(target.attr, name, "params" if trainable else "batch_stats")
    return out


def _returns_model(fn: ast.FunctionDef) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and _base_tail(node.func) in ("Model", "Sequential"):
            return True
    return False


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return node.id if isinstance(node, ast.Name) else ""


def _is_optimizer_call(node) -> bool:
    """``tf.keras.optimizers.Adam(...)``, ``keras.optimizers.SGD(...)``, ``optimizers.AdamW(...)``: not a schedule."""
    if not isinstance(node, ast.Call):
        return False
    parts = _dotted(node.func).split(".")
    return "optimizers" in parts[:-1] and "schedules" not in parts


def _returns_optimizer(fn: ast.FunctionDef) -> bool:
    """Every ``return`` of ``fn`` gives a Keras optimizer built there (directly or through one name)."""
    own = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    built = {t.id for n in ast.walk(fn) if isinstance(n, ast.Assign) and _is_optimizer_call(n.value)
             for t in n.targets if isinstance(t, ast.Name)}
    rebound = {t.id for n in ast.walk(fn) if isinstance(n, ast.Assign) and not _is_optimizer_call(n.value)
               for t in n.targets if isinstance(t, ast.Name)}
    return bool(own) and all(_is_optimizer_call(r.value) or (isinstance(r.value, ast.Name) and r.value.id in built
                                                               and r.value.id not in rebound) for r in own)


def training_layer_names() -> frozenset[str]:
    """Class names of the layers whose call mapping uses the training flag (from the tables)."""
    from tern.records import DROP, tables

    return frozenset(
        name.rsplit(".", 1)[-1]
        for name, record in tables().layers.items()
        if record.call.get("training", DROP) != DROP
    )


def _builds_training_layers(fn: ast.FunctionDef, names: frozenset[str]) -> bool:
    return any(isinstance(node, ast.Call) and _base_tail(node.func) in names for node in ast.walk(fn))


def _has_param(fn: ast.FunctionDef, name: str) -> bool:
    return any(a.arg == name for a in (*fn.args.args, *fn.args.kwonlyargs))


def scan_source(source: str, module: str, info: PackageInfo, training_layers: frozenset[str] = frozenset()) -> None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    scan_datasets(tree, info.datasets, source=source)
    scan_models(tree, module, _is_test_module(module), info.models)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _returns_model(node):
            info.model_builders.add(node.name)
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            info.calls[node.name] = {
                _base_tail(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)
            } - {""}
        if isinstance(node, ast.FunctionDef) and not _is_test_module(module):
            info.functions.append(node)
            if _returns_optimizer(node):
                info.optimizer_factories.add(node.name)
        if isinstance(node, ast.ClassDef):
            bases = tuple(_base_tail(b) for b in node.bases)
            info.classes[node.name] = ClassInfo(node.name, module, bases, _weights(node))
        elif isinstance(node, ast.FunctionDef) and _returns_model(node):
            info.factories.add(node.name)
        elif isinstance(node, ast.FunctionDef) and _builds_training_layers(node, training_layers) and not _has_param(node, "training"):
            info.training_helpers.add(node.name)


def _is_test_module(module: str) -> bool:
    base = module.rsplit(".", 1)[-1]
    return base.startswith("test_") or base.endswith("_test") or base == "conftest"


def close_over_bases(info: PackageInfo) -> PackageInfo:
    """Keep only classes that are Keras layers/models, directly or through package bases;
    decide which functions are training steps now that every module was seen."""
    info.train, info.train_refusals = analyse(info.functions)
    keras = {n for n, c in info.classes.items() if set(c.bases) & KERAS_BASES}
    changed = True
    while changed:
        changed = False
        for name, cls in info.classes.items():
            if name not in keras and set(cls.bases) & keras:
                keras.add(name)
                changed = True
    info.classes = {n: c for n, c in info.classes.items() if n in keras}
    analyse_models(info.models, info.factories, set(info.classes))
    return info


def scan_package(root: Path, files: list[Path]) -> PackageInfo:
    info = PackageInfo()
    training_layers = training_layer_names()
    for path in files:
        try:
            source = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        scan_source(source, module, info, training_layers)
    return close_over_bases(info)
