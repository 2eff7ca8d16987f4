"""Keras ``Layer``/``Model`` subclasses become ``flax.linen.Module`` dataclasses.

* constructor parameters become dataclass fields (``name``/``**kwargs`` go: Flax has its own);
* ``__init__`` becomes ``setup`` (sublayers, derived config); same-name stores are dropped;
* ``call(inputs, training=None, mask=None)`` becomes ``__call__`` with ``training: bool = False``;
* ``build`` + ``add_weight`` become a ``@nn.compact`` ``__call__`` with ``self.param``
  (trainable) or ``self.variable("batch_stats", ...)`` (non-trainable) created from the
  input shape; ``.assign``/``.assign_add`` become ``.value`` updates guarded by
  ``not self.is_initializing()``, so ``init`` does not update state (Keras' ``build``
  creates weights without running an update);
* sublayers ``build`` creates (their size often read from the input shape) become named
  submodules of that compact ``__call__`` (``dense = nn.Dense(..., name="dense")``), so
  their variables sit where ``setup`` would put ``self.dense``'s; sublayers of ``__init__``
  stay in ``setup`` beside it (Flax allows both in one module).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import re

import libcst as cst
import libcst.matchers as m

from tern.engine.dispatch import CachedHooks
from tern.engine.context import LayerRef
from tern.engine.convert import CONVERTERS
from tern.engine.results import Refusal
from tern.engine.results import code
from tern.engine.rule import Rule
from tern.engine.walk import children, findall, nodes, walk
from tern.engine.transform import transform
from tern_rules.structure.setup_containers import CompareAsLists, FrozenDictChecks, fill_as_locals, setup_lists
from tern_rules.structure.training_helpers import passes_training, with_training
from tern.features.training import TrainingFacts

#: Keras 2's BaseRandomLayer (tf_keras, tf.keras before 2.16) is a Layer with a seeded generator,
#: ``self._random_generator``: its draws take Flax's "dropout" stream (structure/random_generator.py)
RANDOM_LAYER = "keras.__internal__.layers.BaseRandomLayer"
KERAS_BASES = {"keras.layers.Layer", "keras.Layer", "keras.Model", "keras.models.Model", RANDOM_LAYER}
DROPPED_METHODS = {"get_config", "from_config", "compute_output_shape", "compute_output_spec"}
SELF = "self"


@dataclass
class KerasClass:
    name: str
    params: list[cst.Param] = field(default_factory=list)
    sublayers: dict[str, LayerRef] = field(default_factory=dict)
    weights: dict[str, str] = field(default_factory=dict)  # attr -> collection
    build_assigned: set[str] = field(default_factory=set)
    build_layers: set[str] = field(default_factory=set)  # sublayers ``build`` creates: named locals of the compact ``__call__``
    factory_layers: set[str] = field(default_factory=set)  # what package factories made (``DarknetConvBlock(...)``): unknown kind
    has_build: bool = False
    bases: frozenset[str] = frozenset()  # the canonical names of its TF/Keras bases
    refusal: str | None = None
    frame_depth: int = 0
    #: metric trackers of a class whose train_step/test_step tern translates (tern/features/training/step_overrides.py)
    trackers: tuple[str, ...] = ()
    #: ``call`` makes layers inline (``layers.Dropout(rate)(x)``): "stateless" ones Flax allows
    #: in a ``@nn.compact`` method (beside ``setup``); "weighted" ones it cannot mean
    inline_layers: str = ""

    @property
    def compact(self) -> bool:
        return self.has_build


def _layers_made_inline(ctx, call: cst.FunctionDef) -> str:
    """Whether ``call`` constructs and calls Keras layers in place: "" (no), "stateless" (all
    parameter-free) or "weighted" (a Dense made in ``call`` has new weights on every Keras call:
    no Flax module means that)."""
    records = [ctx.tables.layers.get(ctx.resolve(c.func.func) or "") for c in findall(call, m.Call(func=m.Call()))]
    records = [r for r in records if r is not None]
    if not records:
        return ""
    return "weighted" if any(r.weights for r in records) else "stateless"


def _self_attr(node: cst.BaseExpression) -> str | None:
    """``x`` of ``self.x`` (called for most expressions of a class: no matcher)."""
    if node.__class__ is cst.Attribute and node.value.__class__ is cst.Name and node.value.value == SELF:
        return node.attr.value
    return None


def _methods(node: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    return {
        stmt.name.value: stmt
        for stmt in node.body.body
        if isinstance(stmt, cst.FunctionDef)
    }


def _assignments(body: cst.CSTNode):
    """(attr, value) for every ``self.attr = value`` anywhere in a method body."""
    found: list[tuple[str, cst.BaseExpression]] = []
    for node in findall(body, m.Assign()):  # every ``Assign``, in the order a visitor meets them
        for target in node.targets:
            attr = _self_attr(target.target)
            if attr is not None:
                found.append((attr, node.value))
            elif isinstance(target.target, (cst.Tuple, cst.List)):
                # ``self.us, self.vs = [], []``: each attribute with its own value when the
                # right side is a same-length tuple, else with the whole value
                elements = target.target.elements
                values = node.value.elements if isinstance(node.value, (cst.Tuple, cst.List)) else None
                for i, element in enumerate(elements):
                    attr = _self_attr(element.value)
                    if attr is not None:
                        value = values[i].value if values is not None and len(values) == len(elements) else node.value
                        found.append((attr, value))
    return found


def _layer_ref(ctx, value: cst.BaseExpression) -> LayerRef | None:
    """What ``value`` builds: a table layer, a package module, a Sequential, or a list of one kind."""
    if isinstance(value, (cst.ListComp, cst.List)):
        elements = [value.elt] if isinstance(value, cst.ListComp) else [e.value for e in value.elements]
        refs = [_layer_ref(ctx, e) for e in elements]
        if refs and all(r is not None for r in refs) and len({(id(r.record), r.package_class) for r in refs}) == 1:
            return LayerRef(record=refs[0].record, package_class=refs[0].package_class, many=True)
        return None
    if not isinstance(value, cst.Call):
        return None
    if isinstance(value.func, cst.Name) and ctx.package.is_module_class(value.func.value):
        return LayerRef(package_class=value.func.value)
    name = ctx.resolve(value.func)
    if name is None:
        return None
    if name in ctx.tables.layers:
        return LayerRef(record=ctx.tables.layers[name], built=value)
    if name in ("keras.Sequential", "keras.models.Sequential"):
        return LayerRef(sequential=True)
    return None


def _bind_loop_layers(fn: cst.FunctionDef, info: KerasClass, frame) -> None:
    """``for block in self.blocks`` / ``for d, n in zip(self.denses, self.norms)``: the loop
    variables are elements of sublayer lists, so their calls get the layer call mapping."""

    walk(fn, _LoopLayers(fn, info, frame))


class _LoopLayers(cst.CSTVisitor):
    def __init__(self, fn: cst.FunctionDef, info: KerasClass, frame):
        self.fn, self.info, self.frame = fn, info, frame

    def visit_For(self, node: cst.For) -> None:
        lists, targets = [], []
        attr = _self_attr(node.iter)
        if attr is not None:
            lists, targets = [attr], [node.target]
        elif m.matches(node.iter, m.Call(func=m.Name("zip"))) and isinstance(node.target, cst.Tuple):
            lists = [_self_attr(a.value) for a in node.iter.args]
            targets = [e.value for e in node.target.elements]
        for attr, target in zip(lists, targets):
            ref = self.info.sublayers.get(attr) if attr else None
            if ref is not None and ref.many and isinstance(target, cst.Name):
                self.frame.layers[target.value] = LayerRef(record=ref.record, package_class=ref.package_class)

    def visit_FunctionDef(self, node) -> bool:
        return node is self.fn


def _is_flax_module_call(value: cst.BaseExpression) -> bool:
    from tern.engine.names import dotted_name

    return isinstance(value, cst.Call) and (dotted_name(value.func) or "").startswith(("nn.", "flax.linen."))


def _is_add_weight(value: cst.BaseExpression) -> bool:
    return m.matches(value, m.Call(func=m.Attribute(value=m.Name(SELF), attr=m.Name("add_weight"))))


def analyze(ctx, node: cst.ClassDef) -> KerasClass | None:
    is_keras = False
    bases = set()
    for base in node.bases:
        name = ctx.resolve(base.value)
        if name in KERAS_BASES:
            is_keras = True
            bases.add(name)
        elif isinstance(base.value, cst.Name) and ctx.package.is_module_class(base.value.value):
            is_keras = True
    if not is_keras:
        return None
    info = KerasClass(node.name.value, bases=frozenset(bases))
    steps = ctx.package.fact(TrainingFacts).models.steps.get(info.name)
    info.trackers = steps.trackers if steps is not None else ()
    methods = _methods(node)
    if "call" in methods:
        info.inline_layers = _layers_made_inline(ctx, methods["call"])
        if info.inline_layers == "weighted":
            ctx.todo(f"class {info.name}", "`call` makes a layer with weights each time it runs (new weights on every "
                     "Keras call; Flax allows a module made in `__call__` only under @nn.compact, made once): make it in "
                     "`__init__` or `build`")
    init = methods.get("__init__")
    if init is not None:
        params = init.params
        if params.posonly_params:
            info.refusal = "positional-only constructor parameters"
        info.params = [p for p in (*params.params, *params.kwonly_params) if p.name.value != SELF]
        if _passes_activity_regularizer(init):
            info.refusal = ("`activity_regularizer` passed to the Keras base class: Keras adds a penalty on every "
                            "output (divided by the batch size) that Flax would silently lose: port by hand, recording "
                            "`activity_regularizer(outputs) / batch_size` with `keras_add_loss`")
        factories = _factory_names(ctx, init.body)
        for attr, value in _assignments(init.body):
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in factories:
                info.factory_layers.add(attr)
            ref = _layer_ref(ctx, value)
            if ref is not None:
                info.sublayers[attr] = ref
            elif _is_flax_module_call(value):
                # already Flax (a rerun on partly translated code): still a submodule
                info.sublayers[attr] = LayerRef()
            if _is_add_weight(value):
                info.refusal = "`add_weight` in `__init__` (weights need a shape known at build time)"
    build = methods.get("build")
    if build is not None:
        info.has_build = True
        for attr, value in _assignments(build.body):
            if attr == "built":
                continue  # Keras' bookkeeping: dropped with the build
            info.build_assigned.add(attr)
            if _is_add_weight(value):
                info.weights[attr] = _collection(value)
            elif (ref := _layer_ref(ctx, value) or (LayerRef() if _is_flax_module_call(value) else None)) is not None:
                if attr in info.sublayers:
                    info.refusal = f"`self.{attr}` is created in `__init__` and again in `build`"
                info.sublayers[attr] = ref
                info.build_layers.add(attr)
    if "call" not in methods and ("__call__" not in methods or build is not None):
        # a layer that overrides `__call__` itself skips Keras' build, masks and training
        # flag: with no `build`, that method is the module's `__call__` as written
        info.refusal = info.refusal or "no `call` method"
    if info.build_assigned:
        for name, method in methods.items():
            if name in ("__init__", "build", "call"):
                continue
            used = sorted({attr for attr in _self_attrs_used(method) if attr in info.build_assigned})
            if used:
                info.refusal = info.refusal or (
                    f"`{name}` uses `self.{used[0]}`, created in `build`: a compact Flax module has its "
                    "weights only inside `__call__`; inline the method into `call` or port by hand"
                )
    return info


def _passes_activity_regularizer(init: cst.FunctionDef) -> bool:
    """``super().__init__(activity_regularizer=<not None>)``: dropped with the call, it would lose a penalty."""
    for stmt in init.body.body:
        if _is_super_init(stmt):
            for arg in stmt.body[0].value.args:
                if arg.keyword is not None and arg.keyword.value == "activity_regularizer" and not m.matches(arg.value, m.Name("None")):
                    return True
    return False


def _self_attrs_used(node: cst.CSTNode) -> set[str]:
    return {name for attr in findall(node, m.Attribute()) if (name := _self_attr(attr)) is not None}


def _collection(call: cst.Call) -> str:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "trainable":
            if m.matches(arg.value, m.Name("False")):
                return "batch_stats"
    return "params"


class _ParamsToFields(CachedHooks):
    """Constructor parameter loads become ``self.<field>`` in ``setup``."""

    def __init__(self, names: set[str]):
        self.names = names

    @classmethod
    def applied(cls, node: cst.CSTNode, names: set[str]) -> cst.CSTNode:
        """``node`` with the transform applied; ``node`` itself where it reads none of ``names``
        (the transform would rebuild every node to change none)."""
        if not any(name.value in names for name in findall(node, m.Name())):
            return node
        return transform(node, cls(names))

    def leave_Name(self, original, updated):
        if updated.value in self.names:
            return cst.Attribute(value=cst.Name(SELF), attr=cst.Name(updated.value))
        return updated

    def leave_Arg(self, original, updated):
        return updated.with_changes(keyword=original.keyword)

    def leave_Attribute(self, original, updated):
        return updated.with_changes(attr=original.attr)

    def leave_Param(self, original, updated):
        return original

    def leave_AssignTarget(self, original, updated):
        return original.with_changes(target=updated.target) if not isinstance(original.target, cst.Name) else original


_LIST_MUTATORS = frozenset({"append", "insert", "extend", "pop", "remove", "sort", "reverse", "clear"})


def _mutated(body: cst.CSTNode, names: set[str]) -> set[str]:
    """Parameters ``body`` changes in place (``thresholds.insert(0, x)``, ``sizes[0] = 1``)."""
    out: set[str] = set()
    for call in findall(body, m.Call(func=m.Attribute(value=m.Name(), attr=m.Name()))):
        if call.func.value.value in names and call.func.attr.value in _LIST_MUTATORS:
            out.add(call.func.value.value)
    for target in findall(body, m.AssignTarget(target=m.Subscript(value=m.Name()))):
        if target.target.value.value in names:
            out.add(target.target.value.value)
    return out


def _list_params(init: cst.FunctionDef, names: set[str]) -> set[str]:
    """Parameters whose list-ness the constructor relies on: annotated as lists, or changed in
    place. Flax keeps a list given to a field as a tuple (``sorted(t) != t`` would then always
    hold, ``t.insert`` would fail), so the constructor's code reads a list copy of the field."""
    out = _mutated(init.body, names)
    for param in (*init.params.params, *init.params.kwonly_params):
        if param.name.value in names and param.annotation is not None:
            hint = param.annotation.annotation
            hint = hint.value if isinstance(hint, cst.Subscript) else hint
            if m.matches(hint, m.Name("list") | m.Name("List") | m.Attribute(attr=m.Name("List"))):
                out.add(param.name.value)
    return out


def _list_copies(names) -> list[cst.BaseStatement]:
    return [cst.parse_statement(f"{p} = list(self.{p}) if isinstance(self.{p}, tuple) else self.{p}\n") for p in sorted(names)]


def _rebound(body: cst.CSTNode, names: set[str]) -> set[str]:
    """Which of ``names`` ``body`` assigns (``x = ...``, ``x += ...``), at any depth."""
    stores = (*findall(body, m.AssignTarget()), *findall(body, m.AugAssign()))
    return {node.target.value for node in stores if isinstance(node.target, cst.Name) and node.target.value in names}


def _translated_params(stmts) -> dict[str, cst.Param]:
    """The constructor's parameters after translation (defaults such as ``keras.activations.relu``)."""
    for stmt in stmts:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "__init__":
            return {p.name.value: p for p in (*stmt.params.params, *stmt.params.kwonly_params)}
    return {}


def _annotation(param: cst.Param) -> str:
    default = param.default
    kind = "typing.Any"
    if isinstance(default, cst.Integer):
        kind = "int"
    elif isinstance(default, cst.Float):
        kind = "float"
    elif m.matches(default, m.Name("True") | m.Name("False")):
        kind = "bool"
    elif isinstance(default, (cst.SimpleString, cst.ConcatenatedString)):
        kind = "str"
    return kind


def _is_super_init(stmt: cst.CSTNode) -> bool:
    """A line that is only ``super().__init__(...)`` (asked of every statement of a class: no matcher)."""
    if stmt.__class__ is not cst.SimpleStatementLine or len(stmt.body) != 1 or stmt.body[0].__class__ is not cst.Expr:
        return False
    call = stmt.body[0].value
    if call.__class__ is not cst.Call or call.func.__class__ is not cst.Attribute or call.func.attr.value != "__init__":
        return False
    inner = call.func.value
    return inner.__class__ is cst.Call and inner.func.__class__ is cst.Name and inner.func.value == "super"


def _is_same_store(stmt: cst.CSTNode, params: set[str]) -> bool:
    if not m.matches(stmt, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget()])])):
        return False
    assign = stmt.body[0]
    attr = _self_attr(assign.targets[0].target)
    return attr is not None and attr in params and m.matches(assign.value, m.Name(attr))


class KerasClassRule(Rule):
    id = "structure:keras-class"
    consumes = frozenset(KERAS_BASES)
    scope = "all"
    order = 10

    def visit_class(self, ctx, node):
        info = analyze(ctx, node)
        if info is not None:
            info.frame_depth = len(ctx.frames)
        ctx.classes[-1] = info

    def visit_function(self, ctx, node):
        info = ctx.keras_class
        # a method directly inside the Keras class: frames are one deeper than classes' methods
        if info is None or len(ctx.frames) != info.frame_depth + 1:
            return
        frame = ctx.frame
        frame.in_module_method = True
        _bind_loop_layers(node, info, frame)
        if node.name.value in ("call", "__call__"):
            frame.training = "training"
        elif _has_param(node, "training"):
            frame.training = "training"

    def leave_call(self, ctx, original, updated):
        info = ctx.keras_class
        if info is None or ctx.frame is None or not ctx.frame.in_module_method:
            return None
        attr = _self_attr(original.func)
        ref = info.sublayers.get(attr) if attr else None
        if ref is None and isinstance(original.func, cst.Name):
            ref = ctx.frame.layers.get(original.func.value)
        flag = ctx.frame.training
        if not flag or passes_training(updated):
            return None
        if attr in info.factory_layers and attr not in info.sublayers:
            # a factory's product (a Sequential it builds, a model): whether it takes the flag, only it can say
            return _through_keras_call(updated, flag)
        held = _held_element(original.func)
        element = info.sublayers.get(held) if held is not None else None
        if held is not None and (element is None or element.record is None):
            # an element of a held list or dict of layers: a package class's takes the flag; of what
            # the translation cannot tell (a factory's product), the call asks the callee, as Keras does
            if element is not None and element.package_class and element.many:
                return with_training(updated, flag)
            return _through_keras_call(updated, flag)
        if ref is not None and ref.package_class and not ref.many:
            return with_training(updated, flag)
        return None

    def leave_class(self, ctx, original, updated):
        info = ctx.keras_class
        if info is None:
            return None
        if info.refusal:
            ctx.todo(f"class {info.name}", f"not converted to nn.Module: {info.refusal}")
            return None
        new_bases = []
        for base in updated.bases:
            name = ctx.resolve(base.value)
            if name in KERAS_BASES:
                new_bases.append(base.with_changes(value=ctx.target_name("flax.linen.Module")))
            else:
                new_bases.append(base)
        new_bases = [b.with_changes(comma=cst.MaybeSentinel.DEFAULT) if i == len(new_bases) - 1 else b for i, b in enumerate(new_bases)]
        param_names = {p.name.value for p in info.params}
        body: list[cst.CSTNode] = []
        docstring = []
        stmts = list(updated.body.body)
        if stmts and m.matches(stmts[0], m.SimpleStatementLine(body=[m.Expr(value=m.SimpleString())])):
            docstring = [stmts.pop(0)]
        fields = []
        translated = _translated_params(stmts)
        for param in info.params:
            if param.name.value == "name":
                continue  # flax.linen.Module has its own `name` field (keyword-only), the layer's name as in Keras
            param = translated.get(param.name.value, param)  # its default as the rules left it
            annotation = _annotation(param)
            if annotation == "typing.Any":
                ctx.plan.spell("typing")
            target = cst.Name(param.name.value)
            default = param.default
            if isinstance(default, cst.List):
                default = cst.Tuple(default.elements)
            fields.append(
                cst.SimpleStatementLine(
                    [cst.AnnAssign(target=target, annotation=cst.Annotation(cst.parse_expression(annotation)), value=default)]
                )
            )
        conflicts = _field_conflicts(original, param_names)
        if conflicts:
            stmts = [transform(s, _RenameSelfAttrs(conflicts)) for s in stmts]
        methods = {s.name.value: s for s in stmts if isinstance(s, cst.FunctionDef)}
        out_methods: list[cst.CSTNode] = []
        for stmt in stmts:
            if not isinstance(stmt, cst.FunctionDef):
                out_methods.append(stmt)
                continue
            name = stmt.name.value
            if name == "__init__":
                stmt, trackers = _tracker_properties(ctx, stmt, info, param_names)
                stmt, checks, derived = _constructor_checks(stmt, param_names, ctx.package_helpers, methods, stmts)
                if checks is not None:
                    out_methods.append(checks)
                    out_methods.extend(derived)
                setup = self._setup(ctx, stmt, info, param_names)
                if setup is not None:
                    out_methods.append(setup.with_changes(leading_lines=[cst.EmptyLine(indent=False)]) if checks else setup)
                out_methods.extend(trackers)
            elif name == "build":
                continue
            elif name in DROPPED_METHODS:
                continue
            elif name == "call":
                call = self._call(ctx, stmt, methods.get("build"), info)
                if isinstance(call, Refusal):
                    ctx.todo(f"class {info.name}", call.reason)
                    return None
                out_methods.append(call)
            else:
                out_methods.append(stmt)
        setup = next((s for s in out_methods if isinstance(s, cst.FunctionDef) and s.name.value == "setup"), None)
        lists = setup_lists(setup)
        if setup is not None:
            filled, unsafe = fill_as_locals(setup)
            out_methods = [filled if s is setup else s for s in out_methods]
            for attr in sorted(unsafe):
                ctx.todo(f"class {info.name}", f"`self.{attr}` is filled after setup assigns it, on some ways through "
                         "setup only: Flax freezes a list/dict setup assigns (tuple, FrozenDict), so filling it fails; "
                         "build it in a local and assign it once")
        if lists:
            out_methods = [transform(s, CompareAsLists(lists)) for s in out_methods]
        if any(findall(s, m.Call(func=m.Name("isinstance"))) for s in out_methods if isinstance(s, cst.FunctionDef)):
            checks = FrozenDictChecks(lambda: ctx.target_name("flax.core.FrozenDict"))
            out_methods = [transform(s, checks) if isinstance(s, cst.FunctionDef) else s for s in out_methods]
        resolved = _resolved_once(setup)
        if resolved:
            out_methods = [s if s is setup else transform(s, _LookupOnce(resolved)) for s in out_methods]
        if fields and out_methods and isinstance(out_methods[0], cst.FunctionDef) and not out_methods[0].leading_lines:
            out_methods[0] = out_methods[0].with_changes(leading_lines=[cst.EmptyLine()])
        body = docstring + fields + out_methods
        if not body:
            body = [cst.SimpleStatementLine([cst.Pass()])]
        return updated.with_changes(
            bases=new_bases,
            body=updated.body.with_changes(body=body),
        )

    # -- __init__ -> setup -----------------------------------------------------------
    def _setup(self, ctx, init: cst.FunctionDef, info: KerasClass, params: set[str]):
        kept = [
            s for s in init.body.body
            if not _is_super_init(s) and not _is_same_store(s, params)
            and not (isinstance(s, cst.SimpleStatementLine) and m.matches(s.body[0], m.Expr(value=m.SimpleString())))
        ]
        if not kept:
            return None
        leading = list(kept[0].leading_lines)
        while leading and leading[0].comment is None:
            leading.pop(0)  # the blank line after what moved out (super().__init__, a check): none at the top of setup
        kept[0] = kept[0].with_changes(leading_lines=leading)
        lists = _list_params(init, params) & _names_in(kept)
        rebound = _rebound(init.body, params) - lists
        block = cst.IndentedBlock(kept)
        block = _ParamsToFields.applied(block, params - rebound - lists)
        prelude = _list_copies(lists) + [cst.parse_statement(f"{p} = self.{p}\n") for p in sorted(rebound)]
        return init.with_changes(
            name=cst.Name("setup"),
            params=cst.Parameters([cst.Param(cst.Name(SELF))]),
            whitespace_before_params=cst.SimpleWhitespace(""),
            body=block.with_changes(body=[*prelude, *block.body]),
        )

    # -- call -> __call__ -------------------------------------------------------------
    def _call(self, ctx, call: cst.FunctionDef, build: cst.FunctionDef | None, info: KerasClass):
        params = list(call.params.params)
        has_training = any(p.name.value == "training" for p in params)
        new_params = []
        for p in params:
            if p.name.value == "training":
                p = p.with_changes(
                    annotation=cst.Annotation(cst.Name("bool")),
                    default=cst.Name("False") if m.matches(p.default, m.Name("None")) or p.default is None else p.default,
                    equal=cst.AssignEqual(cst.SimpleWhitespace(" "), cst.SimpleWhitespace(" ")),
                )
            new_params.append(p)
        if not has_training:
            new_params.append(
                cst.Param(
                    cst.Name("training"),
                    annotation=cst.Annotation(cst.Name("bool")),
                    default=cst.Name("False"),
                    equal=cst.AssignEqual(cst.SimpleWhitespace(" "), cst.SimpleWhitespace(" ")),
                )
            )
        new_params = [
            p.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if i < len(new_params) - 1 else cst.MaybeSentinel.DEFAULT)
            for i, p in enumerate(new_params)
        ]
        out = call.with_changes(name=cst.Name("__call__"), params=call.params.with_changes(params=new_params))
        own = {p.name.value for p in info.params} | set(info.sublayers) | set(info.weights)
        policy = frozenset(DTYPE_POLICY) - own
        if any(_self_attr(a) in policy for a in findall(out, m.Attribute(value=m.Name(SELF)))):  # else: out as it is
            out = transform(out, _DtypePolicy(ctx, policy))
        if not info.compact:
            if info.inline_layers == "stateless":
                out = out.with_changes(decorators=[cst.Decorator(ctx.target_name("flax.linen.compact")), *out.decorators])
            return out
        return self._compact(ctx, out, build, info)

    def _compact(self, ctx, call: cst.FunctionDef, build: cst.FunctionDef, info: KerasClass):
        build_params = [p for p in build.params.params if p.name.value != SELF]
        call_params = [p for p in call.params.params if p.name.value != SELF]
        if not call_params:
            return Refusal("`call` takes no inputs")
        inputs = call_params[0].name.value
        weights = _WeightRewriter(ctx, info)
        build = build.with_changes(body=build.body.with_changes(
            body=[s for s in build.body.body if not _is_dead_name_guard(s)]))
        build_body = transform(build.body, weights)
        if weights.refusal:
            return Refusal(weights.refusal)
        call_body = transform(call.body, weights)
        if weights.refusal:
            return Refusal(weights.refusal)
        build_stmts = [s for s in _strip_doc(build_body.body) if not _is_keras_build_bookkeeping(s)]
        call_stmts = list(call_body.body)
        doc = [] if _strip_doc(call_stmts) == call_stmts else [call_stmts.pop(0)]
        call_stmts = [s for s in call_stmts if not _is_lazy_build_guard(s)]
        prelude: list[cst.CSTNode] = []
        if build_params and build_params[0].name.value in _names_in([*build_stmts, *call_stmts]):
            ctx.plan.spell("jax")
            ctx.plan.spell("jax.numpy")
            prelude.append(cst.parse_statement(f"{build_params[0].name.value} = jax.tree_util.tree_map(jnp.shape, {inputs})\n"))
        if not build_stmts and not prelude and call_body.deep_equals(call.body) and info.inline_layers != "stateless":
            return call.with_changes(body=call.body.with_changes(body=[*doc, *call_stmts]))  # build made nothing
        body = [*doc, *prelude, *build_stmts, *call_stmts]
        decorator = cst.Decorator(ctx.target_name("flax.linen.compact"))
        return call.with_changes(decorators=[decorator, *call.decorators], body=call.body.with_changes(body=body))


def _factory_names(ctx, body: cst.BaseSuite) -> set[str]:
    """Package functions that build layers or models, and local names bound to one of them
    (``ConvBlock = DarknetConvBlockDepthwise if use_depthwise else DarknetConvBlock``)."""
    package = ctx.package
    names = set(package.sequential_factories) | set(package.factories) | set(package.model_builders)
    for assign in findall(body, m.Assign(targets=[m.AssignTarget(target=m.Name())], value=m.IfExp())):
        branches = (assign.value.body, assign.value.orelse)
        if all(isinstance(b, cst.Name) and b.value in names for b in branches):
            names.add(assign.targets[0].target.value)
    return names


def _held_element(func: cst.BaseExpression) -> str | None:
    """``attr`` of ``self.attr[i]`` / ``self.attr["key"]``: an element of held layers."""
    if isinstance(func, cst.Subscript) and len(func.slice) == 1 and isinstance(func.slice[0].slice, cst.Index):
        return _self_attr(func.value)
    return None


def _through_keras_call(call: cst.Call, flag: str) -> cst.Call:
    """``f(x)`` -> ``keras_call(f, x, training=flag)`` (rules/support/keras_call.py)."""
    return call.with_changes(func=cst.Name("keras_call"), args=[
        cst.Arg(call.func, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), *with_training(call, flag).args])


def _constructor_checks(init: cst.FunctionDef, params: set[str], helpers: frozenset[str] = frozenset(),
                        methods: dict[str, cst.FunctionDef] | None = None,
                        body: list | None = None) -> tuple[cst.FunctionDef, cst.FunctionDef | None, list[cst.FunctionDef]]:
    """``init`` without its argument checks, a ``__post_init__`` that makes them, and the
    properties those checks read.

    ``if filters < 1: raise ValueError(...)`` in a Keras constructor raises when the layer is
    made; Flax runs ``setup`` lazily, at the first ``init``/``apply``, so a check left there
    would pass construction silently. A check moves when it reads constructor parameters only
    (and builtins) and does nothing but raise; ``__post_init__`` reads the fields.

    A value computed by a package helper from the parameters alone (``h, w =
    conv_utils.normalize_tuple(block_size, 2, "block_size")``) may raise too: the helper
    is called in ``__post_init__`` as well, for its checks, and ``setup`` still computes
    the value.

    A method of the class that does nothing but such checks (keras-cv's
    ``self._validate_user_layers(lateral_layers, "lateral_layers")``, in the branch where the
    argument was given) is called in ``__post_init__`` too, under the same condition on
    the parameters, and no longer in ``setup``. What it reads of ``self`` must be fields or
    values the constructor computed once from parameters alone (``self.pyramid_levels =
    list(range(min_level, max_level + 1))``): those become properties, since nothing can be
    assigned to a Flax module before it is made."""
    rebound = _rebound(init.body, params)
    lists = _list_params(init, params)
    checkers = _check_methods(methods or {}, body or [])
    checks, kept, changed = [], [], set()
    derived: dict[str, cst.BaseExpression] = {}
    used: set[str] = set()
    stores = _Stores(body or [])
    for stmt in init.body.body:
        plain = params - rebound - changed
        if _is_argument_check(stmt, plain):
            checks.append(_ParamsToFields.applied(stmt, params - lists))
            continue
        call = _checking_call(stmt, plain, helpers)
        if call is not None:
            checks.append(cst.SimpleStatementLine(
                [cst.Expr(_ParamsToFields.applied(call, params - lists))],
                leading_lines=[cst.EmptyLine(comment=cst.Comment(
                    "# as Keras did when the layer was made, for its argument checks (setup keeps the value)"))]))
        attr, value = _derived_value(stmt, plain - lists, stores)
        if attr is not None and attr not in params:
            derived[attr] = value
        found = _method_checks(stmt, checkers, plain - lists, set(derived) | params)
        if found is not None:
            check, stmt, reads = found
            checks.append(_ParamsToFields.applied(check, params - lists))
            used |= reads & set(derived)
            if stmt is None:
                continue
        kept.append(stmt)
        changed |= _mutated(stmt, params)
    if not checks:
        return init, None, []
    properties = []
    for attr in sorted(used):
        properties.append(cst.FunctionDef(
            name=cst.Name(attr), params=cst.Parameters([cst.Param(cst.Name(SELF))]),
            decorators=[cst.Decorator(cst.Name("property"))], leading_lines=[cst.EmptyLine(indent=False)],
            body=cst.IndentedBlock([cst.SimpleStatementLine([cst.Return(_ParamsToFields.applied(derived[attr], params))])])))
        kept = [s for s in kept if _derived_value(s, params, stores)[0] != attr]
    copies = _list_copies(lists & set().union(*(_names_in([c]) for c in checks)))
    post_body = [*copies, *checks, cst.parse_statement("super().__post_init__()\n")]
    post_init = cst.FunctionDef(
        name=cst.Name("__post_init__"), params=cst.Parameters([cst.Param(cst.Name(SELF))]),
        body=cst.IndentedBlock(post_body), leading_lines=init.leading_lines,
    )
    return init.with_changes(body=init.body.with_changes(body=kept)), post_init, properties


def _check_methods(methods: dict[str, cst.FunctionDef], body: list) -> dict[str, set[str]]:
    """Methods that do nothing but argument checks (``if ...: raise``), with the attributes
    of ``self`` each reads."""
    out = {}
    for name, fn in methods.items():
        if name.startswith("__") or fn.decorators or fn.params.star_arg is not cst.MaybeSentinel.DEFAULT \
                or fn.params.kwonly_params or fn.params.star_kwarg is not None:
            continue
        stmts = _strip_doc(list(fn.body.body))
        names = {p.name.value for p in fn.params.params}
        if stmts and all(_raises_only_on(st, names) for st in stmts):
            out[name] = _self_attrs_used(fn.body)
    return out


def _raises_only_on(stmt: cst.CSTNode, names: set[str]) -> bool:
    """``if <reads the method's arguments, builtins and self's attributes>: raise ...``."""
    if not isinstance(stmt, cst.If) or stmt.orelse is not None:
        return False
    if not all(isinstance(s, cst.SimpleStatementLine) and all(isinstance(b, cst.Raise) for b in s.body)
               for s in stmt.body.body):
        return False
    return {n.value for n in _names_read(stmt)} <= names | _BUILTINS


def _derived_value(stmt: cst.CSTNode, params: set[str], stores: "_Stores") -> tuple[str | None, cst.BaseExpression | None]:
    """``self.attr = <parameters, literals and builtins>``, assigned nowhere else in the class
    and never changed in place: (attr, value); else (None, None)."""
    if not m.matches(stmt, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget()])])):
        return None, None
    attr = _self_attr(stmt.body[0].targets[0].target)
    value = stmt.body[0].value
    names = {n.value for n in _names_read(value)}
    if attr is None or not names <= params | _BUILTINS or SELF in names:
        return None, None
    return (attr, value) if stores.of(attr) == 1 else (None, None)


class _Stores:
    """Per ``self.<attr>``, how often a class body assigns it, augments it, calls a method of
    it or assigns an item of it: counted in one walk, when first asked."""

    def __init__(self, body: list) -> None:
        self._body, self._counts = body, None

    def of(self, attr: str) -> int:
        if self._counts is None:
            self._counts = Counter()
            for stmt in self._body:
                for node in nodes(stmt):
                    kind = node.__class__  # LibCST's concrete classes (an ABC's isinstance that fails is slow)
                    if kind is cst.AssignTarget:
                        target = node.target.value if isinstance(node.target, cst.Subscript) else node.target
                        stored = _self_attr(target)
                    elif kind is cst.AugAssign:
                        stored = _self_attr(node.target)
                    elif kind is cst.Call and isinstance(node.func, cst.Attribute):
                        stored = _self_attr(node.func.value)
                    else:
                        continue
                    if stored is not None:
                        self._counts[stored] += 1
        return self._counts[attr]


def _method_checks(stmt: cst.CSTNode, checkers: dict[str, set[str]], params: set[str],
                   readable: set[str]) -> tuple[cst.BaseStatement, cst.CSTNode | None, set[str]] | None:
    """A call of a check-only method in ``stmt`` (at its top level, or in a branch of an
    ``if`` on the parameters): (the check for ``__post_init__``, ``stmt`` without the call or
    None, what the method reads of self); None when there is none or it reads other state."""
    def call_of(line: cst.CSTNode) -> str | None:
        if not m.matches(line, m.SimpleStatementLine(body=[m.Expr(value=m.Call(func=m.Attribute(value=m.Name(SELF))))])):
            return None
        call = line.body[0].value
        name = call.func.attr.value
        names = {n.value for arg in call.args for n in _names_read(arg)}
        ok = name in checkers and checkers[name] <= readable and names <= params | _BUILTINS and SELF not in names
        return name if ok else None

    if call_of(stmt):
        return stmt, None, checkers[call_of(stmt)]
    if not isinstance(stmt, cst.If) or not ({n.value for n in _names_read(stmt.test)} <= params | _BUILTINS):
        return None
    branches = [(stmt.test, stmt.body, "body")]
    if isinstance(stmt.orelse, cst.Else):
        negated = stmt.test.expression if m.matches(stmt.test, m.UnaryOperation(operator=m.Not())) else \
            cst.UnaryOperation(operator=cst.Not(), expression=stmt.test.with_changes(
                lpar=[cst.LeftParen()], rpar=[cst.RightParen()]))
        branches.append((negated, stmt.orelse.body, "orelse"))
    for test, block, where in branches:
        lines = [line for line in block.body if call_of(line)]
        if len(lines) != 1:
            continue
        line = lines[0]
        rest = [s for s in block.body if s is not line]
        check = cst.If(test=test, body=cst.IndentedBlock([line.with_changes(leading_lines=[])]))
        if not rest:
            return check, stmt, checkers[call_of(line)]
        new_block = block.with_changes(body=rest)
        kept = stmt.with_changes(body=new_block) if where == "body" else \
            stmt.with_changes(orelse=stmt.orelse.with_changes(body=new_block))
        return check, kept, checkers[call_of(line)]
    return None


def _is_argument_check(stmt: cst.CSTNode, params: set[str]) -> bool:
    if not isinstance(stmt, cst.If) or stmt.orelse is not None:
        return False
    body = stmt.body.body
    if not body or not all(isinstance(s, cst.SimpleStatementLine) and all(isinstance(b, cst.Raise) for b in s.body) for s in body):
        return False
    names = {n.value for n in _names_read(stmt)}
    return bool(names & params) and names <= params | _BUILTINS and SELF not in names


def _checking_call(stmt: cst.CSTNode, params: set[str], helpers: frozenset[str]) -> cst.Call | None:
    """The package-helper call an assignment makes from constructor parameters, literals
    and builtins alone, or None."""
    if not m.matches(stmt, m.SimpleStatementLine(body=[m.Assign(value=m.Call())])):
        return None
    call = stmt.body[0].value
    head = call.func
    while isinstance(head, cst.Attribute):
        head = head.value
    if not isinstance(head, cst.Name) or head.value not in helpers:
        return None
    names = {n.value for arg in call.args for n in _names_read(arg)}
    return call if names & params and names <= params | _BUILTINS and SELF not in names else None


_BUILTINS = frozenset(dir(__import__("builtins")))


def _names_in(stmts) -> set[str]:
    return {n.value for stmt in stmts for n in _names_read(stmt)}


def _names_read(node: cst.CSTNode) -> list[cst.Name]:
    """The names in ``node``, in the order a visitor meets them, but an attribute's name
    (``x`` of ``x.attr`` is read, ``attr`` is no name) and an argument's keyword."""
    found: list[cst.Name] = []
    stack = [node]
    while stack:
        item = stack.pop()
        kind = item.__class__  # LibCST's concrete classes (an ABC's isinstance that fails is slow)
        if kind is cst.Attribute or kind is cst.Arg:
            stack.append(item.value)
        elif kind is cst.Name:
            found.append(item)
        else:
            below = children(item)
            below.reverse()
            stack.extend(below)
    return found


def _tracker_properties(ctx, init: cst.FunctionDef, info: KerasClass, params: set[str]):
    """``init`` without its metric trackers, and one property per tracker.

    Keras metric trackers (``self.loss_tracker = keras.metrics.Mean(name="loss")``) are
    Python objects the trainer updates outside jit and tests read on the model object
    (``model.metrics``, ``model.loss_tracker.result()``). ``setup`` runs only on bound
    clones, so each tracker becomes a property that builds it once per module object, on
    first use (``keras_tracker``); tern/features/training/step_overrides.py checked it has a literal name
    and literal arguments, so building it later builds the same object.
    """
    if not info.trackers:
        return init, []
    kept, properties = [], []
    for stmt in init.body.body:
        attr = None
        if m.matches(stmt, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget()])])):
            attr = _self_attr(stmt.body[0].targets[0].target)
        if attr not in info.trackers:
            kept.append(stmt)
            continue
        value = code(stmt.body[0].value)
        properties.append(cst.parse_statement(
            f"@property\ndef {attr}(self):\n    return keras_tracker(self, \"{attr}\", lambda: {value})\n"
        ).with_changes(leading_lines=[cst.EmptyLine(indent=False)]))
    return init.with_changes(body=init.body.with_changes(body=kept)), properties


def _field_conflicts(cls: cst.ClassDef, params: set[str]) -> dict[str, str]:
    """Constructor params that ``__init__`` overwrites with a derived value.

    A Flax field cannot be reassigned in ``setup``; the derived value moves to ``_name``.
    """
    init = _methods(cls).get("__init__")
    if init is None:
        return {}
    out = {}
    mutated = _mutated(init.body, params)
    for attr, value in _assignments(init.body):
        if attr in params and (not m.matches(value, m.Name(attr)) or attr in mutated):
            out[attr] = f"_{attr}"
    return out


class _RenameSelfAttrs(CachedHooks):
    def __init__(self, names: dict[str, str]):
        self.names = names

    def leave_Attribute(self, original, updated):
        attr = _self_attr(updated)
        if attr in self.names:
            return updated.with_changes(attr=cst.Name(self.names[attr]))
        return updated


_FAN_INIT = re.compile(r"^(nn\.initializers\.(?:glorot|he|lecun)_(?:uniform|normal))\(\)$")


def _keras_fans(init_code: str, shape: cst.BaseExpression | None) -> str | None:
    """Keras computes the fans of a 1-D weight as (n, n); JAX's fan-based initializers need
    2-D shapes, so a literal 1-D shape draws one row of an (n, n) matrix: same fans, same
    distribution."""
    match = _FAN_INIT.match(init_code)
    if match is None or not isinstance(shape, cst.Tuple):
        return init_code
    if len(shape.elements) == 1:
        return f"lambda key, shape, dtype=jnp.float32: {init_code}(key, (shape[0], shape[0]), dtype)[0]"
    if len(shape.elements) == 0:
        return None
    return init_code


def _is_keras_build_bookkeeping(stmt: cst.CSTNode) -> bool:
    """``super().build(input_shape)`` and ``self.built = True``: Keras' own state, nothing in Flax."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    if isinstance(small, cst.Expr) and m.matches(small.value, m.Call(func=m.Attribute(value=m.Call(func=m.Name("super")), attr=m.Name("build")))):
        return True
    return isinstance(small, cst.Assign) and len(small.targets) == 1 and _self_attr(small.targets[0].target) == "built"


def _is_dead_name_guard(stmt: cst.CSTNode) -> bool:
    """``if self.name is None: self.name = backend.get_uid(...)``: Keras names every layer in
    its constructor, so the guard never runs (and Flax's ``self.name`` is the module's own)."""
    if not isinstance(stmt, cst.If) or stmt.orelse is not None:
        return False
    if not m.matches(stmt.test, m.Comparison(left=m.Attribute(value=m.Name(SELF), attr=m.Name("name")),
                                            comparisons=[m.ComparisonTarget(operator=m.Is(), comparator=m.Name("None"))])):
        return False
    return all(isinstance(s, cst.SimpleStatementLine) and all(
        isinstance(b, cst.Assign) and len(b.targets) == 1 and _self_attr(b.targets[0].target) == "name" for b in s.body)
        for s in stmt.body.body)


def _is_table_lookup(node) -> str | None:
    """The table of ``_TERN_<KIND>S.get(v, v)`` (a value-table lookup the translation wrote), else None."""
    if not (isinstance(node, cst.Call) and m.matches(node.func, m.Attribute(value=m.Name(), attr=m.Name("get")))
            and len(node.args) == 2 and node.args[0].value.deep_equals(node.args[1].value)):
        return None
    table = node.func.value.value
    return table if table.startswith("_TERN_") and table.endswith("S") else None


def _resolved_once(setup) -> dict[str, str]:
    """``self.attr`` -> table, for attributes setup assigns once from a table lookup
    (``self._kernel_initializer = _TERN_INITIALIZERS.get(...)``, from ``keras.initializers.get``)."""
    if not isinstance(setup, cst.FunctionDef):
        return {}
    found: dict[str, str | None] = {}
    stores = [a for node in findall(setup, m.Assign()) for a in (_self_attr(t.target) for t in node.targets) if a is not None]
    for node in setup.body.body:  # top-level statements: they run on every way through setup
        for small in getattr(node, "body", ()) if isinstance(node, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                attr = _self_attr(small.targets[0].target)
                if attr is not None:
                    found[attr] = _is_table_lookup(small.value)
    return {a: t for a, t in found.items() if t is not None and stores.count(a) == 1}


class _LookupOnce(CachedHooks):
    """``_TERN_X.get(self.a, self.a)`` -> ``self.a`` where setup already looked ``self.a`` up in that
    table: the table maps names to functions, and a function is not a key, so a second lookup
    gives the same value."""

    def __init__(self, resolved: dict[str, str]):
        self.resolved = resolved

    def leave_Call(self, original, updated):
        table = _is_table_lookup(updated)
        if table is None:
            return updated
        attr = _self_attr(updated.args[0].value)
        return updated.args[0].value if attr is not None and self.resolved.get(attr) == table else updated


#: a Keras layer's dtype policy, read in ``call`` (``tf.cast(y, self.compute_dtype)``): float32, Keras'
#: default, in which every translated module computes (as tern/engine/layers.py's DEFAULT_DTYPES)
DTYPE_POLICY = ("compute_dtype", "dtype", "variable_dtype")


class _DtypePolicy(CachedHooks):
    """``self.compute_dtype`` -> ``jnp.float32`` where the class has no attribute of that name."""

    def __init__(self, ctx, names: frozenset[str]):
        self.ctx, self.names = ctx, names

    def leave_Attribute(self, original, updated):
        if m.matches(updated, m.Attribute(value=m.Name(SELF))) and updated.attr.value in self.names:
            return self.ctx.target_name("jax.numpy.float32")
        return updated


def _is_lazy_build_guard(stmt) -> bool:
    """``if not self.built: self.build(shape)`` in ``call``: Keras' build on first use, which the
    compact ``__call__`` does already (the build's statements come first)."""
    return m.matches(stmt, m.If(
        test=m.UnaryOperation(operator=m.Not(), expression=m.Attribute(value=m.Name(SELF), attr=m.Name("built"))),
        body=m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Expr(value=m.Call(
            func=m.Attribute(value=m.Name(SELF), attr=m.Name("build"))))])]),
        orelse=None,
    ))


def _strip_doc(stmts):
    out = list(stmts)
    if out and m.matches(out[0], m.SimpleStatementLine(body=[m.Expr(value=m.SimpleString())])):
        out.pop(0)
    return out


class _WeightRewriter(CachedHooks):
    """``self.w = self.add_weight(...)`` and uses of ``self.w`` inside a compact ``__call__``."""

    def __init__(self, ctx, info: KerasClass):
        self.ctx = ctx
        self.info = info
        self.refusal: str | None = None

    def leave_Assign(self, original, updated):
        if len(updated.targets) != 1:
            return updated
        attr = _self_attr(original.targets[0].target)
        if attr is None or attr not in self.info.build_assigned:
            return updated
        value = updated.value
        if _is_add_weight(original.value):
            value = self._add_weight(attr, updated.value)
            if value is None:
                return updated
        elif attr in self.info.build_layers and isinstance(value, cst.Call):
            value = _with_name(value, attr)
        return updated.with_changes(targets=[cst.AssignTarget(cst.Name(attr))], value=value)

    def leave_Call(self, original, updated):
        """``self.blocks.append(Dense(...))`` for a list made in build: the i-th layer is named
        ``blocks_<i>``, where Flax puts the i-th element of a list attribute (and weight porting looks)."""
        if not (m.matches(original.func, m.Attribute(attr=m.Name("append"))) and len(original.args) == 1):
            return updated
        attr = _self_attr(original.func.value)
        if attr is None or attr not in self.info.build_assigned or not isinstance(updated.args[0].value, cst.Call):
            return updated
        made = updated.args[0].value
        inner = made.args[0].value if m.matches(made, m.Call(func=m.Name("KerasRegularized"))) and made.args else made
        if _layer_ref(self.ctx, original.args[0].value) is None and not _is_flax_module_call(inner):
            return updated
        name = cst.parse_expression(f'f"{attr}_{{len({attr})}}"')
        return updated.with_changes(args=[updated.args[0].with_changes(value=_with_name(updated.args[0].value, name))])

    def _add_weight(self, attr: str, call: cst.Call):
        args = {}
        for i, arg in enumerate(call.args):
            if arg.keyword is None:
                self.refusal = "positional `add_weight` arguments (Keras 2 and 3 order them differently)"
                return None
            args[arg.keyword.value] = arg.value
        unknown = set(args) - {"shape", "initializer", "dtype", "trainable", "name"}
        if unknown:
            self.refusal = f"`add_weight({', '.join(sorted(unknown))}=...)` has no Flax counterpart here"
            return None
        name = args.get("name")
        name_code = code(name) if name is not None else f'"{attr}"'
        shape = code(args["shape"]) if "shape" in args else "()"
        dtype = args.get("dtype")
        if "initializer" in args:
            init = CONVERTERS["initializer"](args["initializer"], self.ctx)
        else:
            init = self.ctx.target_expr("flax.linen.initializers.glorot_uniform()" if dtype is None else "flax.linen.initializers.zeros")
        if isinstance(init, Refusal) or init is None:
            self.refusal = f"`add_weight` initializer: {init.reason if init else 'none'}"
            return None
        init_code = code(init)
        init_code = _keras_fans(init_code, args.get("shape"))
        if init_code is not None and "jnp." in init_code:
            self.ctx.plan.spell("jax.numpy")
        if init_code is None:
            self.refusal = "`add_weight` of a scalar with a fan-based initializer (Keras uses fans of 1; JAX refuses)"
            return None
        dtype_code = ""
        if dtype is not None:
            converted = CONVERTERS["dtype"](dtype, self.ctx)
            if isinstance(converted, Refusal) or converted is None:
                self.refusal = "`add_weight` dtype cannot be mapped"
                return None
            dtype_code = ", " + code(converted)
        if self.info.weights.get(attr) == "batch_stats":
            return cst.parse_expression(
                f'self.variable("batch_stats", {name_code}, lambda: {init_code}(self.make_rng("params"), {shape}{dtype_code}))'
            )
        return cst.parse_expression(f"self.param({name_code}, {init_code}, {shape}{dtype_code})")

    def leave_Attribute(self, original, updated):
        attr = _self_attr(original)
        if attr is None or attr not in self.info.build_assigned:
            return updated
        if self.info.weights.get(attr) == "batch_stats":
            return cst.Attribute(value=cst.Name(attr), attr=cst.Name("value"))
        return cst.Name(attr)

    def leave_SimpleStatementLine(self, original, updated):
        if len(original.body) != 1 or not m.matches(original.body[0], m.Expr(value=m.Call(func=m.Attribute()))):
            return updated
        call = original.body[0].value
        method = call.func.attr.value
        if method not in ("assign", "assign_add", "assign_sub"):
            return updated
        attr = _self_attr(call.func.value)
        if attr is None or attr not in self.info.weights:
            return updated
        if self.info.weights[attr] != "batch_stats":
            self.refusal = f"`self.{attr}.{method}` on a trainable weight (Flax params are immutable in apply)"
            return updated
        new_call = updated.body[0].value
        if len(new_call.args) != 1:
            self.refusal = f"`{method}` with extra arguments"
            return updated
        value = code(new_call.args[0].value)
        op = {"assign": "", "assign_add": f"{attr}.value + ", "assign_sub": f"{attr}.value - "}[method]
        if op and not isinstance(new_call.args[0].value, (cst.Name, cst.Attribute, cst.Call, cst.Integer, cst.Float, cst.Subscript)):
            value = f"({value})"
        # Keras reads an assigned variable as a new leaf: no gradient flows back through
        # the assignment. A Flax variable's new value is a traced expression that would
        # carry one, so the update stops it explicitly.
        stop = self.ctx.plan.spell("jax") + ".lax.stop_gradient"
        return cst.parse_statement(
            f"if not self.is_initializing():\n    {attr}.value = {stop}({op}{value})\n"
        ).with_changes(leading_lines=updated.leading_lines)


def _with_name(call: cst.Call, name: str | cst.BaseExpression) -> cst.Call:
    """``call`` given ``name="<name>"``: the submodule's variables under the attribute's name. A
    regularized layer (``KerasRegularized(nn.Dense(...), ...)``) names the layer it wraps: built
    inside a compact method, that layer is bound there and holds the variables."""
    if m.matches(call, m.Call(func=m.Name("KerasRegularized"))) and call.args and isinstance(call.args[0].value, cst.Call) \
            and call.args[0].keyword is None:
        return call.with_changes(args=[call.args[0].with_changes(value=_with_name(call.args[0].value, name)), *call.args[1:]])
    args = [a for a in call.args if not (a.keyword is not None and a.keyword.value == "name")]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    value = cst.SimpleString(f'"{name}"') if isinstance(name, str) else name
    args.append(cst.Arg(value, keyword=cst.Name("name"),
                        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
    return call.with_changes(args=args)


def _has_param(node: cst.FunctionDef, name: str) -> bool:
    return any(p.name.value == name for p in node.params.params)


RULE = KerasClassRule()
