"""Keras side of weight porting: a built layer's variables as *units* the Flax side places.

Runs where Keras is imported (the TF worker). A unit is one Keras layer's ported
variables, ``{"scope", "path", "layer", "tree"}``:

- built-in Keras layers are ported through their rule record's weight map
  (``tern.weights.port``), so kernels are transposed, split or reshaped exactly as the
  translation's Flax layer expects;
- a package-defined layer is walked by attribute, which is how the structure rules
  name Flax submodules (``self.dense1`` -> ``dense1``, list items -> ``name_0``);
  variables it holds itself (``self.kernel = self.add_weight(...)``) are named after
  the attribute, as the translation names its ``self.param``;
- ``Sequential`` and functional models have no attribute names: their layers become
  units with ``path=None`` that the Flax side places *in order* within their scope.

The Flax side (``graft.py``) checks every placement against the translation's own
``init`` tree: structure and shapes must agree, nothing may be left over.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from tern.weights.port import ValueOf, port_layer_weights, record_for, variable_path, variable_value

import functools


@functools.cache
def _internal_attributes(base: type) -> frozenset[str]:
    """Attributes every Keras layer/model has (bookkeeping, not user structure): those
    of a bare instance of the Keras base class the layer derives from."""
    names: set[str] = set()
    for cls in base.__mro__:
        if cls.__name__ in {"Layer", "Model"} and cls.__module__.split(".")[0] in {"keras", "tf_keras"}:
            try:
                names.update(vars(cls()))
            except Exception:  # noqa: BLE001 - a base that cannot be built bare adds nothing
                pass
    return frozenset(names)


class PortError(Exception):
    """The Keras structure cannot be mapped (a variable no walk reaches, an unknown layer)."""


def flax_class(record) -> str | None:
    """The Flax module class a layer record builds (``Conv``, ``ConvTranspose``, ``RNN``): the
    Flax side names auto-named submodules after it (``ConvTranspose_0``)."""
    template = record.template[0] if isinstance(record.template, list) else record.template
    template = template["template"] if isinstance(template, dict) else template
    text = record.target or template or ""  # of alternative templates, the first (the usual form)
    match = re.match(r"(?:\{support:(\w+)\}|[\w.]*?(\w+))\(", text) if record.template else None
    if match:
        return match.group(1) or match.group(2)
    return text.rsplit(".", 1)[-1] or None


def _snake_case(name: str) -> str:
    """Keras' auto-name prefix of a class (keras/src/utils/naming.py, to_snake_case)."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def creation_order(layers: list) -> list:
    """A functional model's layers with each class's auto-named layers in the order they were made.

    Keras lists them in topological order; the translation builds them in the order the code
    made them, and the Flax side places same-shaped layers first come, first served. Keras
    numbers auto names per class (``batch_normalization``, ``batch_normalization_1``, ...), so
    within a class the number is the creation order. Layers named by hand keep their place."""
    slots: dict[str, list[int]] = {}
    numbered: dict[int, int] = {}
    for i, sub in enumerate(layers):
        prefix = _snake_case(type(sub).__name__)
        match = re.fullmatch(re.escape(prefix) + r"(?:_(\d+))?", getattr(sub, "name", "") or "")
        if match:
            slots.setdefault(prefix, []).append(i)
            numbered[i] = int(match.group(1) or 0)
    out = list(layers)
    for indexes in slots.values():
        for slot, i in zip(indexes, sorted(indexes, key=numbered.__getitem__)):
            out[slot] = layers[i]
    return out


def is_layer(value: Any) -> bool:
    """``weights`` asked last: on TF's tracked containers it is a property that walks their
    items, and one keyed by layers (Keras keeps such a dict on a model built from other
    models) raises while sorting them."""
    try:
        return hasattr(value, "call") and hasattr(value, "built") and hasattr(value, "weights")
    except Exception:  # noqa: BLE001 - a value whose weights cannot be listed holds none for us
        return False


def _is_variable(value: Any) -> bool:
    return hasattr(value, "assign") and hasattr(value, "trainable") and (hasattr(value, "path") or hasattr(value, "name"))


def _is_container(layer: Any) -> bool:
    """Keras ``Sequential`` or functional ``Model`` (not a user subclass)."""
    name = type(layer).__name__
    module = type(layer).__module__
    return name in {"Sequential", "Functional"} and (module.startswith("keras") or module.startswith("tf_keras"))


def _has_record(layer: Any) -> bool:
    module = type(layer).__module__
    if not (module.startswith("keras") or module.startswith("tf_keras")):
        return False
    try:
        record_for(layer)
    except KeyError:
        return False
    return True


def keras_units(layer: Any, value_of: ValueOf | None = None) -> list[dict]:
    """Every variable of ``layer`` as units (see module docstring); raises PortError
    when some variable is reached by no unit."""
    walk = _Walk(value_of or variable_value)
    walk.layer(layer, "", "")
    missing = [variable_path(v) for v in layer.weights if id(v) not in walk.reached]
    if missing:
        raise PortError(f"variables that no attribute of a package layer reaches: {missing}")
    return walk.units


class _Walk:
    def __init__(self, value_of: ValueOf):
        self.value_of = value_of
        self.units: list[dict] = []
        self.seen: set[int] = set()  # layers already walked (a shared layer lives at its first path)
        self.reached: set[int] = set()  # variables some unit holds

    def layer(self, layer: Any, scope: str, path: str) -> None:
        if id(layer) in self.seen:
            return
        self.seen.add(id(layer))
        name = type(layer).__name__
        if _has_record(layer):
            if layer.weights:
                record = record_for(layer)
                tree = port_layer_weights(record, layer, value_of=self.value_of)
                self.units.append({"scope": scope, "path": path or None, "layer": name, "tree": tree,
                                   "module": flax_class(record), "name": getattr(layer, "name", None)})
                self.reached.update(id(v) for v in layer.weights)
            return
        if _is_container(layer):
            for sub in creation_order(layer.layers):
                # a package layer in a functional/Sequential model: its attributes sit under its Keras name (the
                # translation keeps a functional layer's name=); a table layer is placed in order in the scope
                own = not _has_record(sub) and not _is_container(sub) and getattr(sub, "name", "")
                inner = f"{path}/{sub.name}" if own and path else (sub.name if own else "")
                self.layer(sub, path or scope, inner)
            return
        own: dict[str, dict] = {}
        for attr, value in list(vars(layer).items()):
            if attr in _internal_attributes(type(layer)) or attr.startswith("_self_"):
                continue
            child = f"{path}/{attr}" if path else attr
            if _is_variable(value):
                # a frozen layer's weights stay in Keras' _trainable_variables (layer.trainable = False flips
                # their flag, not the list): params still; only weights made non-trainable are statistics
                created_trainable = any(value is v for v in getattr(layer, "_trainable_variables", ()))
                collection = "params" if value.trainable or created_trainable else "batch_stats"
                own.setdefault(collection, {})[attr] = np.asarray(self.value_of(value))
                self.reached.add(id(value))
            elif is_layer(value):
                self.layer(value, child, child)
            elif isinstance(value, (list, tuple)):
                for i, item in enumerate(value):
                    if is_layer(item):
                        self.layer(item, f"{child}_{i}", f"{child}_{i}")
            elif isinstance(value, dict):
                for key, item in value.items():
                    if is_layer(item):
                        self.layer(item, f"{child}_{key}", f"{child}_{key}")
        if own:
            self.units.append({"scope": path, "path": path, "layer": name, "tree": own, "own": True})
