"""Flax side of weight porting: place Keras *units* (``port.py``) into a Flax tree.

The translation's own ``init`` tree is the guide: a unit goes where its variables fit
exactly (same leaf names, same shapes), and every Flax variable must receive exactly
one Keras value (the ``losses`` collection is no variable: it holds a pass's loss terms).
Named units are looked up at their attribute path, or one level down under ``layers_0``
(the ``nn.Sequential([layer, activation])`` the layer rules emit for fused activations) or
``layer`` (the ``KerasRegularized`` wrapper of a regularized layer), or with one part of the
path prefixed by ``_`` (a constructor argument ``__init__`` overwrites, such as
``self.lateral_layers = lateral_layers or {...}``, stays a Flax field and the sublayers
move to ``_lateral_layers``). Unnamed units (layers of ``Sequential``/functional models) are
placed in order among the still unclaimed submodules of their scope; Flax creates
variables in call order, which is the Keras layer order. A scope Flax does not have (a
``Sequential`` built inline in a compact ``__call__``: Flax gives its layers to the module
whose method created them) falls back to the nearest enclosing scope it has.

A placement that cannot be made is reported, never guessed: ``graft`` returns the
problems, and a case with problems is an error, not a mismatch.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

Leaves = dict[tuple[str, ...], Any]

#: collections a forward pass writes, not weights: the regularization terms the translated
#: modules sow (rules/support/keras_add_loss.py). Kept as ``init`` made them, never ported.
DERIVED = frozenset({"losses"})


def flatten(tree: dict, prefix: tuple[str, ...] = ()) -> Leaves:
    out: Leaves = {}
    for key, value in tree.items():
        if isinstance(value, dict) or hasattr(value, "items"):
            out.update(flatten(dict(value.items()), (*prefix, str(key))))
        else:
            out[(*prefix, str(key))] = value
    return out


def unflatten(leaves: Leaves) -> dict:
    tree: dict = {}
    for path, value in leaves.items():
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return tree


def _split(path: str | None) -> tuple[str, ...]:
    return tuple(p for p in (path or "").split("/") if p)


def _nodes(flat: dict[str, Leaves], collection: str, scope: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Submodule paths under ``scope`` in the order Flax created them, per kind of module.

    Not the dict's order: ``jax.tree_util`` rebuilds dicts with sorted keys, where
    ``BatchNorm_10`` comes before ``BatchNorm_2``. Flax numbers auto-named submodules per
    class in creation order (``Conv_0``, ``Conv_1``, ...), and a functional layer keeps its
    Keras name, numbered per class in creation order too: the numbers, compared as numbers,
    are the creation order."""
    seen: dict[tuple[str, ...], None] = {}
    for path in flat.get(collection, {}):
        if path[: len(scope)] != scope:
            continue
        for depth in range(len(scope), len(path)):
            seen.setdefault(path[:depth], None)
    return sorted(seen, key=lambda path: tuple(_numbered(part) for part in path))


def _numbered(name: str) -> tuple:
    """``Conv_10`` -> ("Conv", 10): numbers compared as numbers; ``dense`` -> ("dense", 0)."""
    match = re.fullmatch(r"(.*?)_(\d+)", name)
    return (match.group(1), int(match.group(2))) if match else (name, 0)


class _Placer:
    def __init__(self, init: dict):
        self.flat = {c: flatten(t) for c, t in init.items()}
        self.placed: dict[tuple[str, tuple[str, ...]], np.ndarray] = {}
        self.problems: list[str] = []

    def fits(self, unit_flat: dict[str, Leaves], base: tuple[str, ...], exact: bool) -> bool:
        for collection, leaves in unit_flat.items():
            have = self.flat.get(collection, {})
            for rel, value in leaves.items():
                key = (*base, *rel)
                if key not in have or (collection, key) in self.placed:
                    return False
                if tuple(np.shape(have[key])) != tuple(np.shape(value)):
                    return False
            if exact:
                under = {k for k in have if k[: len(base)] == base}
                if under != {(*base, *rel) for rel in leaves}:
                    return False
        return True

    def put(self, unit_flat: dict[str, Leaves], base: tuple[str, ...]) -> None:
        for collection, leaves in unit_flat.items():
            for rel, value in leaves.items():
                key = (*base, *rel)
                dtype = np.asarray(self.flat[collection][key]).dtype
                self.placed[(collection, key)] = np.asarray(value).astype(dtype, copy=False)

    def named(self, unit: dict, unit_flat: dict[str, Leaves]) -> None:
        base = _split(unit["path"])
        renamed = [(*base[:i], "_" + part, *base[i + 1:]) for i, part in enumerate(base)]
        for candidate in (base, (*base, "layers_0"), (*base, "layer"), *renamed):
            if self.fits(unit_flat, candidate, exact=False):
                self.put(unit_flat, candidate)
                return
        self.problems.append(f"{unit['layer']} at {'/'.join(base) or '<root>'}: {_describe(unit_flat)} "
                             f"has no matching Flax variables there ({self._describe_at(base)})")

    def ordered(self, unit: dict, unit_flat: dict[str, Leaves]) -> None:
        """The first unclaimed submodule of the scope that holds exactly this layer's
        variables. Keras lists a functional model's layers in topological order and the
        translation may call them in another valid order, so a layer can match a
        submodule created earlier than the previous match."""
        scope = _split(unit["scope"])
        collection = "params" if "params" in unit_flat else next(iter(unit_flat))
        nodes = _nodes(self.flat, collection, scope)
        owner = scope
        while owner and not nodes:  # layers Flax gave to an enclosing module (an inline Sequential)
            owner = owner[:-1]
            nodes = _nodes(self.flat, collection, owner)
        kind = unit.get("module")
        same_kind = [n for n in nodes if kind and n and _numbered(n[-1])[0] == kind]  # ConvTranspose_0 for a Conv2DTranspose
        # a functional layer keeps its Keras name= in the translation: "z_mean" is z_mean's, even
        # though the sorted names put "z_log_var", of the same shapes, first
        same_name = [n for n in nodes if n and unit.get("name") and n[-1] == unit["name"]]
        for node in [*same_name, *same_kind, *(n for n in nodes if n not in same_kind and n not in same_name)]:
            if self.fits(unit_flat, node, exact=True):
                self.put(unit_flat, node)
                return
        self.problems.append(f"{unit['layer']} in {'/'.join(scope) or '<root>'}: "
                             f"no unclaimed Flax submodule holds exactly {_describe(unit_flat)}")

    def _describe_at(self, base: tuple[str, ...]) -> str:
        found = [f"{c}/{'/'.join(k)}{list(np.shape(v))}" for c, leaves in self.flat.items()
                 for k, v in leaves.items() if k[: len(base)] == base]
        return "found " + ", ".join(found[:6]) + (" ..." if len(found) > 6 else "") if found else "nothing there"


def _describe(unit_flat: dict[str, Leaves]) -> str:
    return ", ".join(f"{c}/{'/'.join(k)}{list(np.shape(v))}" for c, leaves in unit_flat.items() for k, v in leaves.items())


def graft(init: dict, units: list[dict]) -> tuple[dict, list[str]]:
    """The ``init`` tree with every leaf replaced by its Keras value, and the problems.

    Problems: a unit with no place, or Flax variables no unit filled."""
    placer = _Placer(init)
    for unit in units:
        unit_flat = {c: flatten(t) for c, t in unit["tree"].items() if t}
        if unit.get("path") is not None:
            placer.named(unit, unit_flat)
        else:
            placer.ordered(unit, unit_flat)
    missing = [f"{c}/{'/'.join(k)}" for c, leaves in placer.flat.items() if c not in DERIVED
               for k in leaves if (c, k) not in placer.placed]
    if missing:
        placer.problems.append("Flax variables with no Keras counterpart: " + ", ".join(missing[:8])
                               + (" ..." if len(missing) > 8 else ""))
    tree = {c: unflatten({k: placer.placed.get((c, k), v) for k, v in leaves.items()}) for c, leaves in placer.flat.items()}
    return tree, placer.problems
