"""Port the variables of a built Keras layer into a Flax variables tree.

A layer record's weight map (``rules/layers/*.toml``, ``weights = [...]``) says which
Keras variable lands where in the Flax tree; the map is data. When the layouts differ,
an entry names a *transform*: a small function in this module, written in the entry as
``"name"`` or ``"name:arg1,arg2"`` (arguments are ints, or strings when not numeric).

Matching Keras variables: an entry's ``keras`` is a ``/``-separated pattern matched
against the trailing components of ``variable.path`` (``"kernel"`` matches
``"lstm/lstm_cell/kernel"`` but not ``".../recurrent_kernel"``); components may use
``fnmatch`` wildcards (``"forward_*/*/kernel"``). Each entry matches at most one
variable (none when the layer was built without it, e.g. ``use_bias=False``), and every
variable of the layer must be used by some entry.

Layer transforms (``LAYER_TRANSFORMS``) take the Keras *layer* instead of one variable:
``sublayer`` ports a wrapped layer (``Bidirectional.forward_layer``) with its own
record and grafts the resulting tree at the entry's ``flax`` path; there ``keras`` names
the attribute that holds the wrapped layer.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import Any

import numpy as np

#: reads the array to port for a Keras variable (default: its value; replay ports
#: gradients through the same map by passing the gradient of each variable)
ValueOf = Callable[[Any], np.ndarray]


def variable_path(variable: Any) -> str:
    """Keras 3's ``variable.path``; legacy Keras 2 (``tf_keras``) only has ``name``
    (``"dense/kernel:0"``)."""
    path = getattr(variable, "path", None)
    return path if isinstance(path, str) else variable.name.rsplit(":", 1)[0]


def variable_value(variable: Any) -> np.ndarray:
    return np.asarray(variable.numpy() if hasattr(variable, "numpy") else variable)

# --------------------------------------------------------------------------------------
# Array transforms: (array, *args) -> array


def identity(x: np.ndarray) -> np.ndarray:
    return x


def depthwise(x: np.ndarray) -> np.ndarray:
    """Keras depthwise kernel ``(*window, in, multiplier)`` to a Flax grouped
    ``Conv`` kernel ``(*window, 1, in * multiplier)``.

    Keras orders output channel ``c * multiplier + m``; a Flax conv with
    ``feature_group_count=in`` gives group ``c`` the outputs
    ``[c * multiplier, (c + 1) * multiplier)``: the same order, so a reshape suffices.
    """
    *window, channels, multiplier = x.shape
    return x.reshape(*window, 1, channels * multiplier)


def reshape(x: np.ndarray, *shape: int) -> np.ndarray:
    """Reshape to ``shape`` (``-1`` allowed)."""
    return x.reshape(shape)


def transpose(x: np.ndarray, *axes: int) -> np.ndarray:
    """Permute axes (no args: reverse them)."""
    return np.transpose(x, axes or None)


def flip_spatial(x: np.ndarray) -> np.ndarray:
    """Flip every axis but the last two (the spatial window of a conv kernel)."""
    return x[tuple(slice(None, None, -1) for _ in range(x.ndim - 2))]


TRANSFORMS: dict[str, Callable[..., np.ndarray]] = {
    "identity": identity,
    "depthwise": depthwise,
    "reshape": reshape,
    "transpose": transpose,
    "flip_spatial": flip_spatial,
}


# --------------------------------------------------------------------------------------
# Layer transforms: (record, keras_layer, attribute, *args) -> Flax subtree


def sublayer(record: Any, keras_layer: Any, attribute: str, *args: Any, value_of: ValueOf | None = None) -> dict:
    """Port the wrapped layer ``getattr(keras_layer, attribute)`` with its own record.

    Returns the variables tree of the wrapped layer (collections first), to be grafted
    under the entry's ``flax`` path inside each collection.
    """
    inner = getattr(keras_layer, attribute)
    return port_layer_weights(record_for(inner), inner, value_of=value_of)


LAYER_TRANSFORMS: dict[str, Callable[..., dict]] = {"sublayer": sublayer}


# --------------------------------------------------------------------------------------


def parse_transform(spec: str) -> tuple[str, tuple[Any, ...]]:
    """``"reshape:2,-1"`` -> ``("reshape", (2, -1))``; ``""`` -> ``("identity", ())``."""
    if not spec:
        return "identity", ()
    name, _, rest = spec.partition(":")
    args: list[Any] = []
    for raw in filter(None, (a.strip() for a in rest.split(","))):
        try:
            args.append(int(raw))
        except ValueError:
            args.append(raw)
    return name.strip(), tuple(args)


def transform_names() -> set[str]:
    return set(TRANSFORMS) | set(LAYER_TRANSFORMS)


def record_for(keras_layer: Any):
    """The layer record whose source is the Keras class of ``keras_layer``."""
    from tern.engine.records import tables

    name = f"keras.layers.{type(keras_layer).__name__}"
    record = tables().layers.get(name)
    if record is None:
        raise KeyError(f"no layer record for {name}")
    return record


def _match(pattern: str, path: str) -> bool:
    want = pattern.split("/")
    have = path.split("/")
    if len(have) < len(want):
        return False
    return all(fnmatch.fnmatchcase(h, w) for h, w in zip(have[-len(want) :], want))


def _put(tree: dict, path: str, value: Any) -> None:
    parts = path.split("/")
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ValueError(f"flax path {path!r} runs through a leaf")
    if parts[-1] in node:
        raise ValueError(f"flax path {path!r} is written twice")
    node[parts[-1]] = value


def _graft(tree: dict, path: str, subtree: dict) -> None:
    """Put each collection of ``subtree`` under ``path`` (``path`` starts with a
    collection name, which is replaced by the subtree's own collections)."""
    _, _, rest = path.partition("/")
    for collection, branch in subtree.items():
        _put(tree, f"{collection}/{rest}" if rest else collection, branch)


def port_layer_weights(
    record: Any, keras_layer: Any, under: str | None = None, value_of: ValueOf | None = None
) -> dict:
    """A Flax variables dict ``{"params": {...}, "batch_stats": {...}}`` from a built
    Keras layer, following ``record.weights``.

    ``under`` nests every collection under a module path: the translation wraps a layer
    with a fused activation or an ``output`` step in ``nn.Sequential([module, ...])``,
    whose variables live under ``"layers_0"``.

    An entry that matches no variable is skipped (``bias`` of a ``use_bias=False``
    layer); callers compare the result with the Flax ``init`` tree. Raises when an entry
    matches several variables, when a variable is left unmapped, or when a transform is
    unknown.
    """
    variables = [(variable_path(v), v) for v in keras_layer.weights]
    used: set[str] = set()
    tree: dict = {}
    for entry in record.weights:
        name, args = parse_transform(entry.transform)
        if name in LAYER_TRANSFORMS:
            subtree = LAYER_TRANSFORMS[name](record, keras_layer, entry.keras, *args, value_of=value_of)
            inner = getattr(keras_layer, entry.keras)
            used.update(variable_path(v) for v in inner.weights)
            _graft(tree, entry.flax, subtree)
            continue
        if name not in TRANSFORMS:
            raise KeyError(f"unknown weight transform {name!r} in {record.source}")
        hits = [(p, v) for p, v in variables if _match(entry.keras, p)]
        if not hits:
            continue  # an optional variable the layer was built without (use_bias=False)
        if len(hits) != 1:
            found = [p for p, _ in hits] or [p for p, _ in variables]
            raise ValueError(
                f"{record.source}: weight {entry.keras!r} matches {len(hits)} variables: {found}"
            )
        path, variable = hits[0]
        used.add(path)
        array = (value_of or variable_value)(variable)
        _put(tree, entry.flax, np.asarray(TRANSFORMS[name](array, *args)))
    unused = [p for p, _ in variables if p not in used]
    if unused:
        raise ValueError(f"{record.source}: Keras variables left unmapped: {unused}")
    if under:
        for part in reversed(under.split("/")):
            tree = {collection: {part: branch} for collection, branch in tree.items()}
    return tree
