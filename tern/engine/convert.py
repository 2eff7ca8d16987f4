"""Value converters named by ``convert`` in the tables: one argument's code in, code out.

A converter returns the new expression, ``None`` to drop the argument (e.g. a linear
activation), or a ``Refusal`` when it cannot be sure: the call is then left as written.
"""

from __future__ import annotations

import ast
import re
from typing import Callable

import libcst as cst

from tern.engine.names import dotted_name
from tern.engine.results import Refusal, code
from tern.engine.templates import RenderContext, expand_template


Result = cst.BaseExpression | None | Refusal


def _config_copy_helper(node: cst.BaseExpression, ctx) -> cst.Arg | None:
    """The one argument of a call to a package function that copies it through its Keras config
    (``PackageInfo.config_copies``): the value such a call gives is its argument's kind."""
    package = getattr(ctx, "package", None)
    if (package is None or not isinstance(node, cst.Call) or not isinstance(node.func, cst.Name)
            or node.func.value not in package.config_copies or len(node.args) != 1 or node.args[0].keyword or node.args[0].star):
        return None
    return node.args[0]


def _literal(node: cst.BaseExpression):
    if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString, cst.Name, cst.Tuple, cst.List, cst.UnaryOperation)):
        try:
            return ast.literal_eval(code(node))
        except (ValueError, SyntaxError):
            return _NOT_LITERAL
    return _NOT_LITERAL


_NOT_LITERAL = object()


def _by_table(kind: str) -> Callable[[cst.BaseExpression, RenderContext], Result]:
    def convert(node: cst.BaseExpression, ctx: RenderContext) -> Result:
        value = _literal(node)
        if value is None:
            return ctx.target_expr("None") if kind != "activation" else None
        if isinstance(value, str):
            target = ctx.value_target(kind, value)
            if target is None:
                return Refusal(_dtype_refusal(ctx, value) if kind == "dtype" else f"no {kind} mapping for {value!r}")
            return None if target == "None" else ctx.target_expr(target)
        key = node
        helper = _config_copy_helper(node, ctx)
        if helper is not None:  # _clone_initializer(self._kernel_initializer): convert what it copies
            inner = convert(helper.value, ctx)
            if inner is None or isinstance(inner, Refusal):
                return inner
            return node.with_changes(args=[helper.with_changes(value=inner)])
        if isinstance(node, cst.Call) and _is_target_side(node.func):
            return node  # already translated (e.g. by an [[api]] record for an initializer class)
        if isinstance(node, cst.Call) and not node.args:
            key = node.func  # keras.initializers.HeNormal()
        source = ctx.resolve(key)
        if source is not None:
            target = ctx.value_target(kind, source)
            if target is None:
                return Refusal(f"no {kind} mapping for {source}")  # a dtype name's own TODO says why
            return None if target == "None" else ctx.target_expr(target)
        if isinstance(node, (cst.Name, cst.Attribute)) and _is_target_side(node):
            return node  # already translated (``jax.nn.relu`` from ``tf.nn.relu``)
        if kind == "dtype" and isinstance(node, (cst.Name, cst.Attribute)):
            return node  # a user variable holding a dtype
        if kind == "initializer" and isinstance(node, cst.Name) and node.value in getattr(ctx, "keras_configs", {}):
            return _config_initializer(ctx.keras_configs[node.value], ctx)
        if kind in ("activation", "initializer") and isinstance(node, (cst.Name, cst.Attribute)):
            return ctx.value_lookup(kind, node)  # a field or variable: map by name at run time
        return Refusal(f"{kind} given as `{code(node)}` cannot be checked statically")

    return convert


#: Keras' VarianceScaling distributions -> jax.nn.initializers.variance_scaling's
_DISTRIBUTIONS = {"truncated_normal": "truncated_normal", "untruncated_normal": "normal", "uniform": "uniform"}


def _config_initializer(value: dict, ctx: RenderContext) -> Result:
    """A Keras initializer config dict (what ``keras.initializers.get`` deserializes) as the
    flax initializer it describes: VarianceScaling with its scale, mode and distribution
    written out, or a class taking no arguments (a seed is dropped: init brings the key)."""
    name, config = value["class_name"], {k: v for k, v in value.get("config", {}).items() if k != "seed"}
    if name == "VarianceScaling":
        scale, mode = config.pop("scale", 1.0), config.pop("mode", "fan_in")
        distribution = _DISTRIBUTIONS.get(config.pop("distribution", "truncated_normal"))
        if config or distribution is None or mode not in ("fan_in", "fan_out", "fan_avg") or not isinstance(scale, (int, float)):
            return Refusal(f"VarianceScaling config {value['config']!r}: not one tern reads")
        return ctx.target_expr(f'flax.linen.initializers.variance_scaling({float(scale)!r}, "{mode}", "{distribution}")')
    target = ctx.value_target("initializer", name)
    if target is None or config:
        return Refusal(f"initializer config {value!r}: no mapping for {name} with these arguments")
    return ctx.target_expr(target)


def _dtype_refusal(ctx, source: str) -> str:
    """Why a dtype string has no JAX name here: its TF name's TODO (64-bit types), or none known."""
    api = ctx.tables.api.get(ctx.dtype_source(source))
    if api is not None and ctx.api_todo(api):
        return f"dtype {source!r}: {ctx.api_todo(api)}"
    return f"no dtype mapping for {source!r}"


def _is_target_side(func: cst.BaseExpression) -> bool:
    return (dotted_name(func) or "").startswith(("nn.", "jax.", "jnp.", "functools.partial"))


def padding(node: cst.BaseExpression, ctx: RenderContext) -> Result:
    value = _literal(node)
    if isinstance(value, str) and value.lower() in ("same", "valid"):
        return cst.SimpleString(f'"{value.upper()}"')
    if isinstance(value, str) and value.lower() == "causal":
        return cst.SimpleString('"CAUSAL"')  # flax.linen.Conv pads causally by that name
    if value is _NOT_LITERAL and isinstance(node, (cst.Name, cst.Attribute)):
        # a variable holding Keras' 'same'/'valid': Flax takes the upper-case names
        # ('causal' would fail loudly in Flax, not silently)
        return cst.parse_expression(f"{code(node)}.upper()")
    return Refusal(f"padding `{code(node)}` is not 'same'/'valid'")


def _tuple_of(n: int) -> Callable[[cst.BaseExpression, RenderContext], Result]:
    def convert(node: cst.BaseExpression, ctx: RenderContext) -> Result:
        value = _literal(node)
        if value is None:
            return None  # Keras' None means "the default": as if not passed
        if isinstance(value, int) and not isinstance(value, bool):
            return cst.parse_expression("(" + ", ".join([str(value)] * n) + ("," if n == 1 else "") + ")")
        if isinstance(value, (tuple, list)) and len(value) == n:
            return cst.parse_expression("(" + ", ".join(repr(v) for v in value) + ("," if n == 1 else "") + ")")
        if value is _NOT_LITERAL:
            text = code(node)
            return cst.parse_expression(
                f"(tuple({text}) if isinstance({text}, (tuple, list)) else ({text},) * {n})"
            )
        return Refusal(f"`{code(node)}` is not an int or a {n}-tuple")

    return convert


def noise_shape(node: cst.BaseExpression, ctx: RenderContext) -> Result:
    """Keras' Dropout ``noise_shape`` as flax's ``broadcast_dims``: a literal shape whose
    ``None`` entries take the input's size and whose 1s broadcast one mask over that axis
    (any other size is the input's own, as Keras requires)."""
    value = _literal(node)
    if value is None:
        return None
    if not isinstance(value, (tuple, list)) or not all(v is None or type(v) is int and v > 0 for v in value):
        return Refusal(f"`{code(node)}` is not a literal shape of ints and None: set broadcast_dims by hand")
    axes = [i for i, v in enumerate(value) if v == 1]
    if not axes:
        return None  # one mask entry per input entry: flax's default
    return cst.parse_expression("(" + ", ".join(map(str, axes)) + ("," if len(axes) == 1 else "") + ")")


def _tf_window(n: int | None) -> Callable[[cst.BaseExpression, RenderContext], Result]:
    """TF's ``ksize``/``strides`` of an ``n``-D pool (``None``: ``tf.nn.max_pool``, whose rank is
    the input's) as flax.linen's spatial tuple. TF takes an int, or a list of 1, n or n + 2 ints
    whose first and last (batch and channels, NHWC) must be 1. A literal is converted here; a
    variable at run time by ``tf_pool_window`` (rules/support), which fails loudly on what it
    cannot read."""

    def convert(node: cst.BaseExpression, ctx: RenderContext) -> Result:
        value = _literal(node)
        if value is _NOT_LITERAL:
            return cst.parse_expression(f"tf_pool_window({code(node)}{'' if n is None else f', {n}'})")
        if isinstance(value, (tuple, list)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            spatial = n if n is not None else {2: 2, 4: 2, 5: 3}.get(len(value))
            if spatial is not None and len(value) == spatial + 2:
                if value[0] != 1 or value[-1] != 1:
                    return Refusal(f"`{code(node)}` pools over the batch or channels (NHWC): flax pools spatial dims only")
                value = value[1:-1]
            elif spatial is not None and len(value) == 1:
                value = list(value) * spatial
            if spatial is not None and len(value) == spatial:
                return cst.parse_expression("(" + ", ".join(map(str, value)) + ("," if spatial == 1 else "") + ")")
        elif isinstance(value, int) and not isinstance(value, bool) and n is not None:
            return cst.parse_expression("(" + ", ".join([str(value)] * n) + ("," if n == 1 else "") + ")")
        if n is None:
            return Refusal(f"`{code(node)}` does not say how many spatial dims tf.nn's pool has (the input's rank): "
                           "use tf.nn.max_pool2d (avg_pool2d, ...) or a [1, ..., 1] list")
        return Refusal(f"`{code(node)}` is not an int or a list of 1, {n} or {n + 2} ints")

    return convert


def negate(node: cst.BaseExpression, ctx: RenderContext) -> Result:
    value = _literal(node)
    if isinstance(value, bool):
        return cst.Name(str(not value))
    if value is None:
        return cst.Name("True")  # training=None means inference outside fit()
    return cst.UnaryOperation(operator=cst.Not(), expression=node)


_ACTIVATION = _by_table("activation")


def cell_activation(node: cst.BaseExpression, ctx: RenderContext) -> Result:
    """An activation field whose default is not the identity (RNN cells): ``None`` and
    ``"linear"`` become ``jax.nn.identity``, not a dropped argument."""
    out = _ACTIVATION(node, ctx)
    return ctx.target_expr("jax.nn.identity") if out is None else out


_SUPPORT_NAME = re.compile(r"\{support:(\w+)\}")


def regularizer(node: cst.BaseExpression, ctx) -> Result:
    """A Keras regularizer argument as a callable ``x -> penalty``: a string or a class
    symbol through the ``regularizer`` value table, a ``keras.regularizers.X(...)`` call as
    its [[api]] record already translated it. A value known only at run time (a variable,
    ``self._kernel_regularizer``) is looked up in the generated table at run time, as Keras'
    layers call ``keras.regularizers.get`` on it: a name is the table's regularizer, a
    callable is called, None adds no term (KerasRegularized skips it); anything else fails
    when called, so no penalty is lost silently. A TF symbol the tables do not know is refused."""
    value = _literal(node)
    if value is None:
        return None
    records = [r for (kind, _), r in ctx.tables.values.items() if kind == "regularizer"]
    if isinstance(value, str):
        record = ctx.tables.value("regularizer", value)
        if record is None:
            return Refusal(f"{value!r} is not a regularizer name keras.regularizers.get accepts here")
        return expand_template(record.target, {}, ctx)
    translated = {name for r in records for name in _SUPPORT_NAME.findall(r.target)}
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in translated:
        return node  # keras.regularizers.L2(...), already translated by its [[api]] record
    source = ctx.resolve(node.func if isinstance(node, cst.Call) else node)
    if source is not None:
        record = ctx.tables.value("regularizer", source) if not isinstance(node, cst.Call) else None
        if record is None:
            return Refusal(f"`{code(node)}` was not translated to a regularizer")
        return expand_template(record.target, {}, ctx)
    if isinstance(node, (cst.Name, cst.Attribute)):
        return ctx.value_lookup("regularizer", node)
    return Refusal(
        f"regularizer given as `{code(node)}` cannot be followed statically: pass "
        "keras.regularizers.L1/L2/L1L2/OrthogonalRegularizer(...) or a name such as 'l2' where the layer is built"
    )


CONVERTERS: dict[str, Callable[[cst.BaseExpression, RenderContext], Result]] = {
    "activation": _ACTIVATION,
    "cell_activation": cell_activation,
    "initializer": _by_table("initializer"),
    "dtype": _by_table("dtype"),
    "padding": padding,
    "tuple1": _tuple_of(1),
    "tuple2": _tuple_of(2),
    "tuple3": _tuple_of(3),
    "negate": negate,
    "noise_shape": noise_shape,
    "regularizer": regularizer,
    "tf_window": _tf_window(None),
    "tf_window1": _tf_window(1),
    "tf_window2": _tf_window(2),
    "tf_window3": _tf_window(3),
}
