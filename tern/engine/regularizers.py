"""Regularizer arguments of a table layer: explicit loss terms through ``KerasRegularized``.

Keras adds a layer's weight penalties (``kernel_regularizer=`` ...) and its activity penalty
to ``layer.losses`` by itself; a Flax module has no such list, and ``nn.Dense`` cannot be
told to keep one. So the layer is wrapped: ``KerasRegularized(nn.Dense(...), activation=...,
weight_regularizers=(("kernel", <regularizer>),), activity_regularizer=<regularizer>)``
(rules/support/KerasRegularized.py) sows each term into the ``losses`` collection during
the forward pass. A wrapper rather than a rewrite of the functional, Sequential and class
rules: the layer stays one expression wherever it stands (inline call, ``setup``
attribute, Sequential element). Its params keep their names: inside ``@nn.compact`` the
wrapped layer is the enclosing module's child as before (``Dense_0``); in ``setup`` or an
``nn.Sequential`` they sit one level down, under ``layer`` (where weight porting looks,
tern/verify/graft.py).

The record's ``regularizers`` table says which Keras variable each parameter penalizes;
the weight map gives its Flax param, which must be that variable as it is (no transform,
not split), else the argument is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from tern.engine.convert import CONVERTERS
from tern.engine.results import Refusal
from tern.engine.records import LayerRecord
from tern.engine.render import Bound
from tern.engine.templates import expand_template

#: the ``regularizers`` value that means "the layer's outputs" (``activity_regularizer``)
OUTPUTS = "outputs"


@dataclass(frozen=True)
class Regularization:
    """Converted regularizers: (Flax param path inside ``params``, regularizer) pairs, and the activity one."""

    weights: tuple[tuple[str, cst.BaseExpression], ...] = ()
    activity: cst.BaseExpression | None = None

    def __bool__(self) -> bool:
        return bool(self.weights) or self.activity is not None


def split(ctx, record: LayerRecord, bound: Bound) -> tuple[Bound, Regularization] | Refusal:
    """The bound arguments without the regularizers, and the regularizers converted."""
    if not record.regularizers:
        return bound, Regularization()
    weights: dict[str, tuple[str, cst.BaseExpression]] = {}
    activity = None
    for name in record.regularizers:
        if name not in bound.args:
            continue
        converted = CONVERTERS["regularizer"](bound.args[name], ctx)
        if isinstance(converted, Refusal):
            return Refusal(f"`{name}`: {converted.reason}")
        if converted is None:
            continue
        penalized = record.regularizers[name]
        if penalized == OUTPUTS:
            activity = converted
            continue
        path = flax_param(record, penalized)
        if isinstance(path, Refusal):
            return path
        weights[name] = (path, converted)
    rest = Bound(
        {k: v for k, v in bound.args.items() if k not in record.regularizers},
        tuple(p for p in bound.positional if p not in record.regularizers),
        bound.variadic,
    )
    return rest, Regularization(tuple(weights.values()), activity)


def flax_param(record: LayerRecord, keras_variable: str) -> str | Refusal:
    """The path inside ``params`` of the Flax array that is exactly this Keras variable."""
    entries = [w for w in record.weights if w.keras == keras_variable]
    if len(entries) != 1 or entries[0].transform or not entries[0].flax.startswith("params/"):
        return Refusal(f"the Keras variable `{keras_variable}` is not one Flax param as it is, so its penalty cannot be computed there")
    return entries[0].flax.split("/", 1)[1]


def wrap(ctx, module: cst.BaseExpression, activation: cst.BaseExpression | None,
         regularization: Regularization) -> cst.BaseExpression | Refusal:
    """``KerasRegularized(module, ...)``; the fused activation goes inside, because Keras
    regularizes the activity after it."""
    values: dict[str, cst.BaseExpression] = {"layer": module}
    pairs = []
    for i, (path, regularizer) in enumerate(regularization.weights):
        values[f"w{i}"] = regularizer
        pairs.append(f'("{path}", {{w{i}}})')
    text = "{support:KerasRegularized}({layer}"
    if activation is not None:
        values["activation"] = activation
        text += ", activation={activation}"
    if pairs:
        text += ", weight_regularizers=(" + ", ".join(pairs) + ("," if len(pairs) == 1 else "") + ")"
    if regularization.activity is not None:
        values["activity"] = regularization.activity
        text += ", activity_regularizer={activity}"
    return expand_template(text + ")", values, ctx)
