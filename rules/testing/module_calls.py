"""Keras-style use of layers and models in tests, made explicit for Flax.

A Keras layer owns its variables and builds them on first call; a Flax module is a
description, and ``init``/``apply`` take the variables explicitly. In a test,
``model(x, training=True)`` becomes ``_tern_apply(model, x, training=True)``: a small
support helper (``support/registry.py``, imported from the package's support module)
that initialises on first use, passes fresh ``dropout`` and ``noise`` keys, applies with
every collection mutable and keeps the updates, exactly as a Keras layer keeps its moving
statistics. ``model.trainable_variables`` and friends
read the helper's variables.

Which names hold modules is known from the package pre-pass (package layer/model
classes and model-building functions) and from table layers constructed in the test.
"""

from __future__ import annotations


import libcst as cst
import libcst.matchers as m

from tern.engine.dispatch import CachedHooks
from tern.engine.rule import Rule
from tern_rules.structure.sequential import becomes_nn_sequential
from tern.engine.nodes import holder
from tern.engine.walk import walk
from tern.engine.transform import transform


LEAVES = {
    "trainable_variables": "params",
    "trainable_weights": "params",
    "non_trainable_variables": "batch_stats",
    "non_trainable_weights": "batch_stats",
    "variables": None,
    "weights": None,
}
KERAS_ONLY = {
    "compile", "fit", "evaluate", "summary", "save", "save_weights", "load_weights", "get_weights",
    "set_weights", "get_config", "to_json", "build", "get_layer", "train_on_batch", "test_on_batch",
}


def assigned_pairs(assign: cst.Assign, ctx=None):
    """(target, value) pairs of ``a = f()`` and of ``a, b = f(), g()`` (same-length tuples), and of
    ``model, optimizer = self._fresh()`` where the test file's helper returns such a tuple (the
    helper's own expressions stand for the values: see ``remember_tuple_return``)."""
    for target in assign.targets:
        t, v = target.target, assign.value
        if isinstance(t, (cst.Tuple, cst.List)) and isinstance(v, cst.Call) and ctx is not None:
            returned = ctx.rule_state.get("tuple_returns", {}).get(holder(v.func))
            if returned is not None and len(returned) == len(t.elements):
                v = cst.Tuple([cst.Element(e) for e in returned])
        if isinstance(t, (cst.Tuple, cst.List)) and isinstance(v, (cst.Tuple, cst.List)) and len(t.elements) == len(v.elements):
            yield from ((te.value, ve.value) for te, ve in zip(t.elements, v.elements))
        else:
            yield t, v


class _Returns(cst.CSTVisitor):
    """The values ``fn``'s own ``return`` statements give (not those of functions inside it)."""

    def __init__(self, fn: cst.FunctionDef):
        self.fn = fn
        self.values: list = []

    def visit_FunctionDef(self, node):
        return node is self.fn

    def visit_Lambda(self, node):
        return False

    def visit_Return(self, node):
        self.values.append(node.value)


def remember_tuple_return(ctx, fn: cst.FunctionDef) -> None:
    """A test helper (function or method) whose one ``return`` gives a tuple: its elements, by the
    name callers use (``make_pair`` or ``self._fresh``). Statements after the definition unpack calls
    to it as if the tuple were written there."""
    returns = _Returns(fn)
    walk(fn, returns)
    returns = returns.values
    if len(returns) != 1 or not isinstance(returns[0], cst.Tuple):
        return
    key = ("self." if ctx.classes else "") + fn.name.value
    ctx.rule_state.setdefault("tuple_returns", {})[key] = tuple(e.value for e in returns[0].elements)


def _modules(ctx) -> dict[str, object]:
    return ctx.rule_state.setdefault("module_names", {})


def _module_kind(ctx, value: cst.BaseExpression):
    """The package class name (or True) if this expression builds a module, else None."""
    if not isinstance(value, cst.Call):
        return None
    func = value.func
    if isinstance(func, cst.Name):
        if ctx.package.is_module_class(func.value):
            return func.value
        if func.value in ctx.package.factories:
            return func.value
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) \
            and func.value.value in _package_modules(ctx) and ctx.package.is_module_class(func.attr.value):
        return func.attr.value
    name = ctx.resolve(func)
    if name is not None and name in ctx.tables.layers:
        return "layer:" + name
    if name == "keras.layers.deserialize":
        return "deserialized"  # a layer rebuilt from keras.layers.serialize's dict (support/keras_deserialize_layer.py)
    if name in ("keras.Sequential", "keras.models.Sequential", "keras.Model", "keras.models.Model"):
        return True
    return None


def _package_modules(ctx) -> set[str]:
    """Names a relative import binds in this test file (``from . import loss``): package modules."""
    return ctx.rule_state.setdefault("package_modules", set())


def _split_weight_layers(ctx) -> frozenset[str]:
    """Class names of table layers whose Keras variables map onto several Flax arrays."""
    return frozenset(
        name.rsplit(".", 1)[-1] for name, r in ctx.tables.layers.items() if not r.weights_one_to_one
    )


def layout_layers(ctx) -> frozenset[str]:
    """Class names of table layers whose Keras variables are not the Flax arrays as they are
    (split into several, or reshaped/transposed on the way)."""
    return frozenset(
        name.rsplit(".", 1)[-1] for name, r in ctx.tables.layers.items()
        if not r.weights_one_to_one or any(w.transform for w in r.weights)
    )


def _keras_layout_may_differ(ctx, kind) -> bool:
    layout = layout_layers(ctx)
    if isinstance(kind, str) and kind.startswith("layer:"):
        return kind.rsplit(".", 1)[-1] in layout
    if isinstance(kind, str):
        return ctx.package.reaches(kind, layout)
    return bool(ctx.rule_state.get("layout_layer_seen"))  # an inline Keras Sequential/Model


def _counts_may_differ(ctx, kind) -> bool:
    split = _split_weight_layers(ctx)
    if isinstance(kind, str) and kind.startswith("layer:"):
        return kind.rsplit(".", 1)[-1] in split
    if isinstance(kind, str):
        return ctx.package.reaches(kind, split)
    return False


def _keras_file(ctx) -> bool:
    """The test file uses TensorFlow/Keras: ``x.get_layer(...)`` there is Keras' (no Flax object has it)."""
    return bool(ctx.scopes.imports_source)


def package_reaches(ctx, layers: frozenset[str]) -> bool:
    """Some package model (class or builder) reaches one of ``layers``: for a model the file does not type."""
    return any(ctx.package.reaches(name, layers) for name in (*ctx.package.classes, *ctx.package.factories))


def _layout(ctx, kind) -> str:
    """How a layer view gives the weights: "keras" (the Flax arrays are Keras' variables), "flax" (some are
    reshaped or transposed: Keras' names refused), "split" (some Keras variables are several Flax arrays)."""
    if _counts_may_differ(ctx, kind) if kind is not None else package_reaches(ctx, _split_weight_layers(ctx)):
        return "split"
    if _keras_layout_may_differ(ctx, kind) if kind is not None else package_reaches(ctx, layout_layers(ctx)):
        return "flax"
    return "keras"


def _plain_sequentials(ctx) -> set[str]:
    """Names bound to a Keras Sequential that is an nn.Sequential of the same layers (``model.layers``)."""
    return ctx.rule_state.setdefault("plain_sequentials", set())


def _is_plain_sequential(ctx, value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.Call) and (becomes_nn_sequential(ctx, value) or (
        isinstance(value.func, cst.Name) and value.func.value in ctx.package.sequential_factories))


def _in_module_code(ctx) -> bool:
    """Inside a Keras class or a functional model's factory that the file defines: code that becomes a Flax
    module's, where a layer call is a submodule call, not a test's call on the registry. A test function that
    builds a functional model and then uses it: the statements after ``Model(...)`` stay the test's."""
    if ctx.keras_class is not None:
        return True
    return bool(ctx.frames and "functional" in ctx.frames[0].tags and "after_model" not in ctx.frames[0].tags)


MODELS = {"keras.Model", "keras.models.Model"}


UNHELD = ("get_layer on a model the test does not hold by name (e.g. a sub-model attribute): its variables are not "
          "in this file's registry")
UNKNOWN_LAYERS = ("model.layers of a model whose construction this file does not show (a parameter, a sub-model "
                  "attribute): only a Keras Sequential's layer list is translated, where the model is known to be one")
LAYER_LIST = ("the Flax module keeps Keras' layer list only for a Keras Sequential that becomes an nn.Sequential of the "
              "same layers (a literal list, no layer taking the training flag); this model's layers have no Keras "
              "index here (a functional model's list starts with its Inputs, a subclassed model's follows its "
              "attributes, a compact module names its layers Dense_0)")


class ModuleCallsRule(Rule):
    id = "testing:module-calls"
    scope = "tests"
    order = 80

    def leave_statement(self, ctx, original, updated):
        """Remember names bound to modules (``model = MLP()``, ``self.layer = ...``) as the
        statements go by: later statements, the only ones that can use them, see them."""
        for small in getattr(original, "body", ()):
            if isinstance(small, cst.ImportFrom) and small.relative and not isinstance(small.names, cst.ImportStar):
                # ``from . import loss``: ``loss.HardNegativeMining(...)`` builds a package module
                _package_modules(ctx).update(a.evaluated_alias or a.evaluated_name for a in small.names)
            if not isinstance(small, cst.Assign):
                continue
            for target, value in assigned_pairs(small, ctx):
                if ctx.frames and "functional" in ctx.frames[0].tags and isinstance(value, cst.Call) \
                        and ctx.resolve(value.func) in MODELS and len(ctx.frames) == 1:
                    ctx.frames[0].tags.add("after_model")  # the graph ends here (rules/structure/functional_model.py)
                kind = _module_kind(ctx, value)
                key = holder(target)
                if kind is not None and key:
                    _modules(ctx)[key] = kind
                if key and _is_plain_sequential(ctx, value):
                    _plain_sequentials(ctx).add(key)
                elif key:
                    _plain_sequentials(ctx).discard(key)
        return None

    def _instance(self, ctx, node: cst.BaseExpression):
        key = holder(node)
        if key is not None and key in _modules(ctx):
            return _modules(ctx)[key]
        return _module_kind(ctx, node)

    def leave_call(self, ctx, original, updated):
        name = ctx.resolve(original.func)
        if name in ctx.tables.layers and name.rsplit(".", 1)[-1] in layout_layers(ctx):
            ctx.rule_state["layout_layer_seen"] = True
        if _in_module_code(ctx):
            return None
        kind = self._instance(ctx, original.func)
        if kind is not None:
            return cst.Call(func=cst.Name("_tern_apply"), args=[cst.Arg(updated.func, comma=_comma()), *updated.args])
        if isinstance(original.func, cst.Attribute):
            receiver = original.func.value
            kind = self._instance(ctx, receiver)
            if original.func.attr.value == "get_layer" and (kind is not None or _keras_file(ctx)):
                within = ()
                if kind is None and not isinstance(receiver, cst.Name):
                    within = self._submodel(ctx, receiver)
                    if isinstance(within, str):
                        ctx.todo("keras.Model.get_layer", within)
                        return None
                return self._get_layer(ctx, kind, updated, within)
            if kind is None or id(original.func) in ctx.rule_state.get("compiled_model_handled", ()):
                return None  # compiled_model_calls.py left this call with its own TODO
            method = original.func.attr.value
            new_receiver = updated.func.value
            if method == "count_params" and not updated.args:
                return transform(cst.parse_expression("sum(int(numpy.size(v)) for v in _tern_leaves(__m__))"), _Put(new_receiver, ctx))
            if method == "predict":
                call = cst.Call(func=cst.Name("_tern_apply"), args=[cst.Arg(new_receiver, comma=_comma()), *updated.args])
                return cst.Call(func=ctx.target_name("numpy.asarray"), args=[cst.Arg(call)])
            if method == "get_weights" and not updated.args and not _keras_layout_may_differ(ctx, kind):
                return cst.Call(func=cst.Name("_tern_keras_weights"), args=[cst.Arg(new_receiver)])
            if method == "get_config" and not updated.args and isinstance(kind, str):
                # a layer's config is its constructor arguments: the module's fields (support/keras_layer_config.py)
                return cst.Call(func=cst.Name("keras_layer_config"), args=[cst.Arg(new_receiver)])
            if method in KERAS_ONLY:
                ctx.todo(f"keras.Model.{method}", "Keras model API with no flax.linen counterpart (training code is translated separately)")
                return None
            args = [cst.Arg(new_receiver, comma=_comma()), *[a.with_changes(comma=_comma()) for a in updated.args]]
            args.append(cst.Arg(cst.SimpleString(f'"{method}"'), keyword=cst.Name("method"), equal=_eq()))
            return cst.Call(func=cst.Name("_tern_apply"), args=args)
        return None

    def _submodel(self, ctx, receiver: cst.BaseExpression) -> tuple[str, ...] | str:
        """``model.encoder`` of ``model.encoder.get_layer(name)``: the sub-model's Flax path in the model's
        variables (``ClassInfo.submodels``: a Flax field of the attribute's name), or why it is not known."""
        holder = self._instance(ctx, receiver.value) if isinstance(receiver, cst.Attribute) else None
        info = ctx.package.classes.get(holder) if isinstance(holder, str) else None
        if info is None:
            return UNHELD
        if receiver.attr.value not in info.submodels:
            return (f"get_layer on `{receiver.attr.value}` of a {holder}: only a sub-model the constructor stores as "
                    "given (`self.encoder = encoder`, a Flax field of that name), in a model building no layers of "
                    "its own, has a known place in the model's variables")
        return (receiver.attr.value,)

    @staticmethod
    def _get_layer(ctx, kind, updated, within=()):
        """``model.get_layer(name)`` -> ``_tern_layer(model, name)``; ``model.encoder.get_layer(name)`` ->
        ``_tern_layer(model, name, within=("encoder",))``. Keras names are unique in a model and a
        functional model's layers keep theirs as Flax names (tern/engine/layers.py), so a name found at the top of the
        variables tree is that layer; one not found (a Keras auto name, a layer without variables) raises there."""
        args = [a for a in updated.args if not a.star]
        if len(args) != 1 or len(updated.args) != 1 or (args[0].keyword and args[0].keyword.value != "name"):
            ctx.todo("keras.Model.get_layer", "only get_layer(name) is translated (not by index)")
            return None
        layout = _layout(ctx, None if within else kind)  # a sub-model's layers: any the package builds
        model = updated.func.value.value if within else updated.func.value
        call_args = [cst.Arg(model, comma=_comma()), args[0].with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)]
        if layout != "keras":
            call_args[-1] = call_args[-1].with_changes(comma=_comma())
            call_args.append(cst.Arg(cst.SimpleString(f'"{layout}"'), keyword=cst.Name("layout"), equal=_eq()))
        if within:
            call_args[-1] = call_args[-1].with_changes(comma=_comma())
            path = cst.Tuple([cst.Element(cst.SimpleString(f'"{name}"'), comma=_comma()) for name in within[:-1]]
                             + [cst.Element(cst.SimpleString(f'"{within[-1]}"'))])
            call_args.append(cst.Arg(path, keyword=cst.Name("within"), equal=_eq()))
        return cst.Call(func=cst.Name("_tern_layer"), args=call_args)

    def _layers(self, ctx, kind, original, updated):
        """``model.layers`` -> ``_tern_layers(model)`` for a Keras Sequential that is an nn.Sequential of the same
        layers (its element i is Keras' layer i, layers without variables included); any other model's is refused."""
        receiver = original.value
        if kind is None:
            if not _keras_file(ctx) or ctx.resolve(original) is not None or ctx.resolve(receiver) is not None \
                    or m.matches(receiver, m.Name("self")):
                return None  # not a model (``keras.layers``, a test's own attribute)
            ctx.todo("keras.Model.layers", UNKNOWN_LAYERS)
            return None
        if isinstance(kind, str) and kind.startswith("layer:"):
            return None
        if holder(receiver) not in _plain_sequentials(ctx) and not _is_plain_sequential(ctx, receiver):
            ctx.todo("keras.Model.layers", LAYER_LIST)
            return None
        args = [cst.Arg(updated.value)]
        layout = _layout(ctx, kind)
        if layout != "keras":
            args = [cst.Arg(updated.value, comma=_comma()),
                    cst.Arg(cst.SimpleString(f'"{layout}"'), keyword=cst.Name("layout"), equal=_eq())]
        return cst.Call(func=cst.Name("_tern_layers"), args=args)

    def leave_attribute(self, ctx, original, updated):
        if _in_module_code(ctx):
            return None
        kind = self._instance(ctx, original.value)
        attr = original.attr.value
        if attr == "layers":
            return self._layers(ctx, kind, original, updated)
        if kind is None:
            return None
        if attr in LEAVES:
            if _counts_may_differ(ctx, kind):
                ctx.todo(
                    f"keras.Model.{attr}",
                    "the model holds layers whose Keras variables are split into several Flax arrays "
                    "(e.g. one kernel per LSTM gate), so variables do not correspond one to one",
                )
                return None
            collection = LEAVES[attr]
            args = [cst.Arg(updated.value)]
            if collection:
                args = [cst.Arg(updated.value, comma=_comma()), cst.Arg(cst.SimpleString(f'"{collection}"'))]
            return cst.Call(func=cst.Name("_tern_leaves"), args=args)
        if attr == "metrics" and isinstance(kind, str) and kind in ctx.package.classes \
                and "metrics" not in ctx.package.classes[kind].members:  # its own `metrics` property is translated with it
            ctx.todo("keras.layers.Layer.metrics", "Keras gathers every Metric object the layer tracks (in the "
                     "order its attributes were set); the translated module has no such list, and `metrics` there is "
                     "at most its own field of that name: list the metric objects the test means")
            return None
        if isinstance(kind, str):
            info = ctx.package.classes.get(kind)
            weight = info.weights.get(attr) if info else None
            if weight is not None:
                return transform(cst.parse_expression(f'_tern_variables(__m__)["{weight.collection}"]["{weight.name}"]'), _Put(updated.value, ctx))
        return None


class _Put(CachedHooks):
    def __init__(self, value, ctx):
        self.value = value
        self.ctx = ctx

    def leave_Name(self, original, updated):
        return self.value if updated.value == "__m__" else updated

    def leave_Attribute(self, original, updated):
        if m.matches(updated, m.Attribute(value=m.Name("numpy"))):
            return self.ctx.target_name("numpy." + updated.attr.value)
        return updated


def _comma():
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def _eq():
    return cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))


RULE = ModuleCallsRule()
