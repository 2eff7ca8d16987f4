"""Package pre-pass: which classes are Keras layers/models, which functions build models.

Uses Python's ``ast`` (much faster than LibCST) over every file once, so that each file's
translation knows about classes defined elsewhere in the package (a test importing
``from mypkg.model import MyModel`` must know ``MyModel`` becomes a Flax module).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, TypeVar

from tern.engine import collection
from tern.engine.ast_walks import children as ast_children, kept_walks, walk as ast_walk
from tern.engine.features import features
from tern.engine.names import ast_tail, may_name

T = TypeVar("T")

KERAS_BASES = {"Layer", "Model", "BaseRandomLayer"}  # tails: BaseRandomLayer is Keras 2's seeded Layer


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
    #: attributes holding a sub-model the constructor stores as given (``self.encoder = encoder``): a Flax
    #: field of that name, so the sub-model's variables are the model's subtree of that name, and (the class
    #: building no layers of its own) the model's variables before its first call are theirs alone
    submodels: tuple[str, ...] = ()
    #: how the class treats Keras' implicit masks (``mask_facts``)
    masks: MaskFacts = field(default_factory=lambda: MaskFacts())
    #: methods and properties the class defines itself (``metrics`` over Keras' own)
    members: frozenset[str] = frozenset()


@dataclass(frozen=True)
class MaskFacts:
    """What Keras does with a mask attached to this class's input (keras/src/layers/layer.py).

    ``takes_mask``: ``call`` has a ``mask`` parameter, so Keras passes the input's mask in;
    ``output``: the mask Keras attaches to the output: ``"input"`` (``supports_masking`` and the
    default ``compute_mask``, or one that returns its mask argument), ``"none"`` (no masking
    support, or a ``compute_mask`` that returns None), ``"unknown"`` (any other
    ``compute_mask``). ``None`` fields: the class does not say, its bases decide.
    """

    takes_mask: bool | None = None
    output: str | None = None
    #: the class builds a layer that makes masks (``mask_zero=True``): its output may carry one
    #: even without masking support (Keras leaves an inner layer's mask on the returned tensor)
    makes_masks: bool = False


def mask_facts(cls: ast.ClassDef, walked: bool = True) -> MaskFacts:
    """``walked``: False when the class' text names neither ``mask_zero`` nor ``supports_masking``
    (its nodes are then not read for them)."""
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    call = methods.get("call")
    takes_mask = _has_param(call, "mask") if call is not None else None
    makes, supports = False, []  # one walk for both
    for node in ast_walk(cls) if walked else ():
        if isinstance(node, ast.keyword) and node.arg == "mask_zero" and not (isinstance(node.value, ast.Constant) and node.value.value is False):
            makes = True
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and any(isinstance(t, ast.Attribute) and t.attr == "supports_masking" for t in node.targets):
            supports.append(node.value.value)
    compute = methods.get("compute_mask")
    if compute is not None:
        return MaskFacts(takes_mask, _compute_mask_output(compute), makes)
    if supports:
        return MaskFacts(takes_mask, "input" if all(v is True for v in supports) else "unknown", makes)
    return MaskFacts(takes_mask, None, makes)


def _compute_mask_output(fn: ast.FunctionDef) -> str:
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    params = [a.arg for a in fn.args.args]
    if len(body) == 1 and isinstance(body[0], ast.Return):
        value = body[0].value
        if value is None or (isinstance(value, ast.Constant) and value.value is None):
            return "none"
        if isinstance(value, ast.Name) and len(params) >= 3 and value.id == params[2]:
            return "input"
    return "unknown"


def class_masks(info: PackageInfo, name: str) -> MaskFacts:
    """``name``'s mask facts, the unsaid ones taken from its package bases (Keras' ``Layer``:
    no ``mask`` parameter, no masking support)."""
    takes, output, makes, seen = None, None, False, set()
    while name in info.classes and name not in seen:
        seen.add(name)
        cls = info.classes[name]
        takes = cls.masks.takes_mask if takes is None else takes
        output = cls.masks.output if output is None else output
        makes = makes or cls.masks.makes_masks
        name = next((b for b in cls.bases if b in info.classes), "")
    return MaskFacts(bool(takes), output or "none", makes)


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
    #: top-level functions of non-test modules, analysed by features once all are seen
    functions: list[ast.FunctionDef] = field(default_factory=list, repr=False)
    #: top-level functions that return a literal ``Sequential([...])`` of layers without a training flag: an
    #: ``nn.Sequential`` of the same layers (rules/structure/sequential.py), Keras' i-th layer its element i
    sequential_factories: set[str] = field(default_factory=set)
    #: top-level functions that only copy their one argument through its Keras config
    #: (``return x.__class__.from_config(x.get_config())``, recommenders' ``_clone_initializer``)
    config_copies: set[str] = field(default_factory=set)
    #: what features know about the package (``Feature.facts``), by type: ``fact(kind)``
    facts: dict[type, object] = field(default_factory=dict, repr=False)

    def fact(self, kind: type[T]) -> T:
        """The package facts of type ``kind`` a feature keeps (empty until it scanned)."""
        if kind not in self.facts:
            self.facts[kind] = kind()
        return self.facts[kind]

    def claimed_functions(self) -> set[str]:
        """Package functions a feature translates its own way (training steps): not plain helpers."""
        return set().union(*(feature.claimed_functions(self) for feature in features()))

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


def is_config_copy(fn: ast.FunctionDef) -> bool:
    """``def f(x): return x.__class__.from_config(x.get_config())`` (a docstring allowed): a fresh
    Keras object with ``x``'s configuration, which for a stateless value is ``x`` itself."""
    args = fn.args
    if len(args.args) != 1 or args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        return False
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return False
    return config_copy_of(body[0].value) == args.args[0].arg


def config_copy_of(node: ast.expr) -> str | None:
    """The copied expression's source if ``node`` is ``x.__class__.from_config(x.get_config())``."""
    if not (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords
            and isinstance(node.func, ast.Attribute) and node.func.attr == "from_config"
            and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "__class__"):
        return None
    inner = node.args[0]
    if not (isinstance(inner, ast.Call) and not inner.args and not inner.keywords
            and isinstance(inner.func, ast.Attribute) and inner.func.attr == "get_config"):
        return None
    copied = ast.unparse(node.func.value.value)
    return copied if ast.unparse(inner.func.value) == copied else None


def _weights(cls: ast.ClassDef, walked: bool = True) -> dict[str, WeightInfo]:
    """``walked``: False when the class' text names no ``add_weight``."""
    out: dict[str, WeightInfo] = {}
    for node in ast_walk(cls) if walked else ():
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


def _stored_submodels(cls: ast.ClassDef) -> tuple[str, ...]:
    """``ClassInfo.submodels``: ``self.a = a`` of ``__init__`` parameters, the only store to ``self.a``,
    ``a`` not rebound; none when the class stores anything else that may hold variables (see
    ``_holds_no_layer``), stores an attribute twice, or has ``build``/``add_weight``."""
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    methods = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    if init is None or "build" in methods:
        return ()
    params = {a.arg for a in (*init.args.args[1:], *init.args.kwonlyargs)}
    rebound = {t.id for n in ast_walk(init) for t in _store_targets(n) if isinstance(t, ast.Name)}
    stores: dict[str, list[ast.expr]] = {}
    for node in ast_walk(cls):
        if isinstance(node, ast.Call) and ast_tail(node.func) == "add_weight":
            return ()
        for target in _store_targets(node):
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                stores.setdefault(target.attr, []).append(getattr(node, "value", None))
    out = []
    for attr, values in stores.items():
        value = values[0] if len(values) == 1 else None
        if isinstance(value, ast.Name) and value.id == attr and attr in params and attr not in rebound:
            out.append(attr)
        elif not _holds_no_layer(value):
            return ()
    return tuple(out)


def _store_targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return [t for target in node.targets for t in ast_walk(target)]
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []


def _holds_no_layer(value: ast.expr | None) -> bool:
    """Whether a stored value cannot hold a layer: no name as it is (``self.enc = encoder``), no call
    other than a metric's (``keras.metrics.Mean(...)``), no function or comprehension."""
    if value is None or isinstance(value, ast.Name):
        return False
    if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
        return all(_holds_no_layer(e) for e in value.elts)
    if isinstance(value, ast.Dict):
        return all(_holds_no_layer(v) for v in value.values)
    return not any(
        (isinstance(n, ast.Call) and "metrics" not in _dotted(n.func).split("."))
        or isinstance(n, (ast.Lambda, ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp))
        for n in ast_walk(value))


def _plain_sequential(node: ast.expr | None, training_layers: frozenset[str]) -> bool:
    """``Sequential([...])`` of a literal list of layer calls, none taking the training flag."""
    if not (isinstance(node, ast.Call) and ast_tail(node.func) == "Sequential"):
        return False
    layers = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "layers"), None)
    return isinstance(layers, (ast.List, ast.Tuple)) and all(
        isinstance(e, ast.Call) and ast_tail(e.func) not in training_layers for e in layers.elts)


def _returns_plain_sequential(fn: ast.FunctionDef, training_layers: frozenset[str]) -> bool:
    """Every ``return`` of ``fn`` gives a plain Sequential built there (directly or through one name bound once)."""
    returns = [n.value for n in ast_walk(fn) if isinstance(n, ast.Return)]
    bound: dict[str, list[ast.expr]] = {}
    for node in ast_walk(fn):
        for target in _store_targets(node):
            if isinstance(target, ast.Name):
                bound.setdefault(target.id, []).append(getattr(node, "value", None))

    def plain(value):
        if isinstance(value, ast.Name) and len(bound.get(value.id, ())) == 1:
            value = bound[value.id][0]
        return _plain_sequential(value, training_layers)

    return bool(returns) and all(plain(r) for r in returns)


def _function_defs(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function definition in ``tree``, nested ones too: definitions are statements, so
    only statements are entered (a tenth of a module's nodes; ``ast.walk`` reads them all)."""
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node
        for name in _STATEMENT_FIELDS:
            todo.extend(getattr(node, name, ()))


#: the fields that hold statements (or handlers and match cases, which hold them)
_STATEMENT_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")


def _returns_model(fn: ast.FunctionDef) -> bool:
    for node in ast_walk(fn):
        if isinstance(node, ast.Call) and ast_tail(node.func) in ("Model", "Sequential"):
            return True
    return False


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return node.id if isinstance(node, ast.Name) else ""


def training_layer_names() -> frozenset[str]:
    """Class names of the layers whose call mapping uses the training flag (from the tables)."""
    from tern.engine.records import DROP, tables

    return frozenset(
        name.rsplit(".", 1)[-1]
        for name, record in tables().layers.items()
        if record.call.get("training", DROP) != DROP
    )


def _builds_training_layers(fn: ast.FunctionDef, names: frozenset[str]) -> bool:
    """Whether ``fn`` itself makes a layer that takes the training flag; a class it defines
    (a translated Sequential factory's module) takes the flag in its own ``__call__``."""
    stack = ast_children(fn)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.ClassDef):
            continue
        if isinstance(node, ast.Call) and ast_tail(node.func) in names:
            return True
        stack.extend(ast_children(node))
    return False


def _has_param(fn: ast.FunctionDef, name: str) -> bool:
    return any(a.arg == name for a in (*fn.args.args, *fn.args.kwonlyargs))


def scan_source(source: str, module: str, info: PackageInfo, training_layers: frozenset[str] = frozenset()) -> None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    for feature in features():
        feature.scan(info, tree, module, _is_test_module(module), source)
    # most modules name neither: their functions are not walked for what they cannot call
    may_build_models = may_name(source, ("Model", "Sequential"))
    may_build_training = may_name(source, training_layers)
    may_add_weights, may_mask = may_name(source, ("add_weight",)), may_name(source, ("mask_zero", "supports_masking"))
    builds_model: dict[int, bool] = {}  # id(function) -> whether it calls Model/Sequential, for the loop below too
    for node in _function_defs(tree):
        builds_model[id(node)] = may_build_models and _returns_model(node)
        if builds_model[id(node)]:
            info.model_builders.add(node.name)
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            info.calls[node.name] = {
                ast_tail(n.func) for n in ast_walk(node) if isinstance(n, ast.Call)
            } - {""}
        if isinstance(node, ast.FunctionDef) and not _is_test_module(module):
            info.functions.append(node)
            if is_config_copy(node):
                info.config_copies.add(node.name)
        if isinstance(node, ast.FunctionDef) and may_build_models and _returns_plain_sequential(node, training_layers):
            info.sequential_factories.add(node.name)
        if isinstance(node, ast.ClassDef):
            bases = tuple(ast_tail(b) for b in node.bases)
            info.classes[node.name] = ClassInfo(
                node.name, module, bases, _weights(node, may_add_weights), _stored_submodels(node),
                mask_facts(node, may_mask),
                frozenset(n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))),
            )
        elif isinstance(node, ast.FunctionDef) and builds_model[id(node)]:
            info.factories.add(node.name)
        elif (isinstance(node, ast.FunctionDef) and may_build_training and _builds_training_layers(node, training_layers)
              and not _has_param(node, "training")):
            info.training_helpers.add(node.name)


def _is_test_module(module: str) -> bool:
    base = module.rsplit(".", 1)[-1]
    return base.startswith("test_") or base.endswith("_test") or base == "conftest"


def close_over_bases(info: PackageInfo) -> PackageInfo:
    """Keep only classes that are Keras layers/models, directly or through package bases;
    let the features decide what needs every module seen (training steps, drawing
    functions); then close the training helpers over the package's calls."""
    keras = {n for n, c in info.classes.items() if set(c.bases) & KERAS_BASES}
    changed = True
    while changed:
        changed = False
        for name, cls in info.classes.items():
            if name not in keras and set(cls.bases) & keras:
                keras.add(name)
                changed = True
    info.classes = {n: c for n, c in info.classes.items() if n in keras}
    for feature in features():
        feature.close(info)
    # a function that calls a training helper (keras-cv's DownSampleBlock calling Block) passes the flag on
    builders = {fn.name for fn in info.functions if not _has_param(fn, "training")} - info.claimed_functions() \
        - info.factories - info.model_builders
    info.training_helpers = close_over_calls(info.training_helpers, info.calls, builders)
    return info


def close_over_calls(direct: set[str], calls: dict[str, set[str]], functions: set[str]) -> set[str]:
    """``direct`` and every function of ``functions`` that calls one of the set, transitively."""
    closed = set(direct)
    changed = True
    while changed:
        changed = False
        for name in functions - closed:
            if calls.get(name, set()) & closed:
                closed.add(name)
                changed = True
    return closed


def scan_package(root: Path, files: list[Path]) -> PackageInfo:
    with kept_walks():  # every module and function is walked many times over: each walk once
        return _scan_package(root, files)


def _scan_package(root: Path, files: list[Path]) -> PackageInfo:
    info = PackageInfo()
    training_layers = training_layer_names()
    # No collection during the scan, and none at its end: scanning makes no cyclic garbage
    # (none on 904 Keras sources) and keeps every module's tree, so each collection would only
    # walk the trees made so far (a collection per module was 5% of the scan, one at the end 8%)
    with collection.paused():
        for path in files:
            try:
                source = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            module = ".".join(path.relative_to(root).with_suffix("").parts)
            scan_source(source, module, info, training_layers)
        return close_over_bases(info)
