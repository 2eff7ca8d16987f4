"""Nested values with arrays, as JSON plus an ``.npz`` file (no pickle anywhere).

``pack`` turns lists, tuples, dicts, scalars, ``None`` and arrays into JSON with
``{"__array__": i}`` placeholders and a list of arrays; ``unpack`` reverses it. Tuples
are kept apart from lists (``{"__tuple__": [...]}``) because constructor arguments
such as ``hidden_sizes=(32, 16)`` become Flax dataclass fields, where the difference
can matter; a dict with int keys (``{3: p3, 4: p4}``) is kept as ``{"__items__": [[k, v]]}``.
A layer the package built, given to another's constructor (``VAE(make_encoder(2),
make_decoder(2))``), is kept as how to build it again (``{"__built__": origin}``) when the
caller asks for it. Anything else is refused with a clear reason.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np


class Unpackable(TypeError):
    """A value that has no JSON/array form (a layer passed as an argument, a callable)."""


def pack(value: Any, arrays: list[np.ndarray], to_array: Callable[[Any], np.ndarray | None] = lambda v: None,
         origin_of: Callable[[Any], dict | None] = lambda v: None) -> Any:
    """``origin_of``: how a value that is a layer was built (the recorder's tag), or None."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        arrays.append(value)
        return {"__array__": len(arrays) - 1}
    if isinstance(value, tuple):
        return {"__tuple__": [pack(v, arrays, to_array, origin_of) for v in value]}
    if isinstance(value, list):
        return [pack(v, arrays, to_array, origin_of) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {"__dict__": {k: pack(v, arrays, to_array, origin_of) for k, v in value.items()}}
        if all(isinstance(k, (int, str)) and not isinstance(k, bool) for k in value):
            # feature pyramids key levels by int ({3: p3, 4: p4}): JSON objects cannot
            return {"__items__": [[k, pack(v, arrays, to_array, origin_of)] for k, v in value.items()]}
        raise Unpackable(f"dict with keys other than str and int: {list(value)[:3]}")
    array = to_array(value)
    if array is not None:
        arrays.append(np.asarray(array))
        return {"__array__": len(arrays) - 1}
    origin = origin_of(value)
    if origin is not None:
        return {"__built__": origin}
    raise Unpackable(f"cannot record a {type(value).__name__}")


def unpack(data: Any, arrays: Any, as_array: Callable[[np.ndarray], Any] = lambda a: a,
           built: Callable[[dict], Any] = lambda data: data) -> Any:
    """``built``: what a packed layer (``{"__built__": origin}``) becomes; left packed by default."""
    if isinstance(data, list):
        return [unpack(v, arrays, as_array, built) for v in data]
    if isinstance(data, dict):
        if "__array__" in data:
            return as_array(arrays[f"a{data['__array__']}"] if not isinstance(arrays, list) else arrays[data["__array__"]])
        if "__built__" in data:
            return built(data)
        if "__tuple__" in data:
            return tuple(unpack(v, arrays, as_array, built) for v in data["__tuple__"])
        if "__dict__" in data:
            return {k: unpack(v, arrays, as_array, built) for k, v in data["__dict__"].items()}
        if "__items__" in data:
            return {k: unpack(v, arrays, as_array, built) for k, v in data["__items__"]}
    return data


def shift(data: Any, offset: int) -> Any:
    """Packed ``data`` with every array placeholder moved by ``offset`` (to merge array lists)."""
    if isinstance(data, list):
        return [shift(v, offset) for v in data]
    if isinstance(data, dict):
        if "__array__" in data and len(data) == 1:
            return {"__array__": data["__array__"] + offset}
        return {k: shift(v, offset) for k, v in data.items()}
    return data


def array_paths(data: Any, prefix: str = "") -> list[tuple[str, int]]:
    """``(readable path, array index)`` for every array placeholder, in the order
    ``jax.tree_util.tree_leaves`` and ``tf.nest.flatten`` give the values: dict keys sorted,
    not in the order the dict was filled (a pyramid built from its top level down)."""
    if isinstance(data, list):
        return [p for i, v in enumerate(data) for p in array_paths(v, f"{prefix}[{i}]")]
    if isinstance(data, dict):
        if "__array__" in data:
            return [(prefix or "output", data["__array__"])]
        if "__tuple__" in data:
            return array_paths(data["__tuple__"], prefix)
        if "__dict__" in data:
            return [p for k, v in _sorted(data["__dict__"].items()) for p in array_paths(v, f"{prefix}[{k!r}]")]
        if "__items__" in data:
            return [p for k, v in _sorted(data["__items__"]) for p in array_paths(v, f"{prefix}[{k!r}]")]
    return []


def _sorted(items) -> list:
    items = list(items)
    try:
        return sorted(items, key=lambda item: item[0])
    except TypeError:  # keys of mixed types: neither flattener sorts them either
        return items


def write_case(directory: Path, name: str, meta: dict, arrays: list[np.ndarray]) -> None:
    """``name.npz`` then ``name.json`` (the JSON last: its presence marks a whole case),
    each written to a temporary name and renamed."""
    for i, array in enumerate(arrays):
        if array.dtype == object:
            raise TypeError(f"array {i} of case {name} has dtype object (not a numeric array)")
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.npz.tmp"
    with open(tmp, "wb") as fh:
        np.savez(fh, **{f"a{i}": a for i, a in enumerate(arrays)})
    os.replace(tmp, directory / f"{name}.npz")
    tmp = directory / f".{name}.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, directory / f"{name}.json")


def read_case(directory: Path, name: str) -> tuple[dict, dict[str, np.ndarray]]:
    """A case's meta and every one of its arrays, read once and the ``.npz`` closed: an open
    ``.npz`` decompresses an array again at each access, and a replay's probes and variants
    read every array many times (half of a warm function replay's time went there)."""
    meta = json.loads((directory / f"{name}.json").read_text())
    with np.load(directory / f"{name}.npz", allow_pickle=False) as stored:
        return meta, {key: stored[key] for key in stored.files}


def replaced(arrays: Any, positions: list[int], values: list) -> dict:
    """A recording's arrays (by ``a<i>`` name) with those at ``positions`` replaced by
    ``values`` (arrays, tensors or tracers), for ``unpack``: a recorded call made again on
    moved float arguments."""
    moved = dict(arrays)
    for at, value in zip(positions, values):
        moved[f"a{at}"] = value
    return moved


def origin_target(origin: dict) -> Any:
    """The class or function a recorded ``origin`` names, imported from whichever package is on
    the path (the translation in a JAX worker, the original in a TF one)."""
    target = importlib.import_module(origin["module"])
    for part in origin["name"].split("."):
        target = getattr(target, part)
    return target


def build(origin: dict, arrays: Any, target: Callable[[dict], Any] = origin_target) -> Any:
    """The layer or model made again the way the test made it: the same class or factory, the
    same recorded arguments, a layer among them made again first. ``target``: the class or
    function an origin names."""
    return target(origin)(*unpack_built(origin.get("args", []), arrays, target),
                          **unpack_built(origin.get("kwargs", {}), arrays, target))


def unpack_built(data: Any, arrays: Any, target: Callable[[dict], Any] = origin_target) -> Any:
    """``unpack`` with every packed layer (``{"__built__": origin}``) made again (``build``)."""
    return unpack(data, arrays, built=lambda packed: build(packed["__built__"], [], target))
