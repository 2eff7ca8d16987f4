"""Calls beyond the tests' configurations: one integer, boolean, float or integer-tuple
argument changed.

Probes (``probes.py``) move a call's float inputs; the branches a translation can get wrong
on *configuration* are left where the tests put them. ``max_iters`` at its default never
stops a loop that converges first, so ``i < max_iters`` against ``i <= max_iters`` agrees on
every test. So the recorder calls a package function once more per variant of its first
recorded call: one parameter (passed or left at its default) changed as ``_changes`` says, at
most ``LIMIT`` variants, each parameter's first change before any second one. A variant TF
refuses (an error, a result that is not arrays) is dropped; the replay calls the translation
with the same change and compares every result. Layers and models are built again the same
way from their constructor's or factory's arguments (``record.Recorder.record_variants``),
two per target, and each is an ordinary recorded case marked ``variant``.

A translation without a parameter of that name cannot be given the change: the variant is
listed as not compared. One that raises where TF returned is a mismatch: the user's call
with that argument would fail.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

LIMIT = 4
#: parameters a variant leaves alone: the mode (replayed in both already), seeds (other draws,
#: not another configuration), and the Keras bookkeeping that changes what is compared
UNVARIED = frozenset({"self", "training", "seed", "trainable", "dynamic", "autocast"})


def _signature(fn: Any) -> inspect.Signature | None:
    """A function's signature (a ``tf.function``'s Python one's); a class's ``__init__``'s
    without ``self`` (the recorder wraps ``__new__``, which takes anything)."""
    try:
        if isinstance(fn, type):
            signature = inspect.signature(fn.__init__)
            return signature.replace(parameters=list(signature.parameters.values())[1:])
        return inspect.signature(getattr(fn, "python_function", fn))
    except (TypeError, ValueError):
        return None


def _changes(value: Any) -> list[tuple[int, Any]]:
    """``(rank, new value)`` per change of one plain argument; every variant of rank 0 is
    tried before any of rank 1.

    - a bool flipped;
    - an int set to 1 (the edge most branches test: strides, groups, heads), then to one
      more than it was, then to 0 (a loop that never runs), ranked in that order;
    - a tuple or list of ints with its last element repeated (``widths=(8,)`` becomes two
      stages of equal width; a fixed-length one such as ``kernel_size`` is refused, cheaply),
      then with every element set to 1 (``strides=(2, 2)``: no downsampling);
    - a float halved (0.0 becomes 0.5), after every first structural change: a rate or a
      threshold written in place of its argument.

    Strings are left alone: a translation spells ``"same"`` or ``"relu"`` its own way, and
    which other values a parameter takes is the library's to say, not the recorder's."""
    if isinstance(value, bool):
        return [(0, not value)]
    if isinstance(value, int):
        new = [v for v in dict.fromkeys((1, value + 1, 0)) if v != value]
        return list(enumerate(new))
    if isinstance(value, float):
        return [(1, value / 2 if value else 0.5)]
    elements = value["__tuple__"] if isinstance(value, dict) and set(value) == {"__tuple__"} else value
    if isinstance(elements, (tuple, list)) and elements and all(
            isinstance(v, int) and not isinstance(v, bool) for v in elements):
        wrap = (lambda v: v) if isinstance(value, list) else (lambda v: {"__tuple__": v})
        longer, ones = [*elements, elements[-1]], [1] * len(elements)
        return [(0, wrap(longer))] + ([(1, wrap(ones))] if list(elements) != ones else [])
    return []


def _shown(value: Any) -> str:
    """A changed value as the report names it: ``widths=(1, 1)``, not its packed form."""
    if isinstance(value, dict) and "__tuple__" in value:
        return repr(tuple(value["__tuple__"]))
    return repr(value)


def argument_variants(fn: Any, inputs: list, limit: int = LIMIT) -> list[dict]:
    """``{"name", "param", "inputs"}`` per variant of a call whose packed arguments are
    ``inputs`` (``[args, {"__dict__": kwargs}]``, ``arrays.pack``): the same structure with one
    plain value changed, or one default passed by keyword; ``limit`` of them at most."""
    signature = _signature(fn)
    if signature is None:
        return []
    args, kwargs = inputs[0], inputs[1]["__dict__"]
    per_parameter: list[list[tuple[int, dict]]] = []
    positional = [p for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD) or parameter.name in UNVARIED:
            continue
        at = positional.index(parameter) if parameter in positional else None
        if at is not None and at < len(args):
            value, place = args[at], ("args", at)
        elif parameter.name in kwargs:
            value, place = kwargs[parameter.name], ("kwargs", parameter.name)
        elif parameter.default is not parameter.empty and parameter.kind != parameter.POSITIONAL_ONLY:
            value, place = parameter.default, ("kwargs", parameter.name)
        else:
            continue
        changes = []
        for rank, new in _changes(value):
            changed = copy.deepcopy(inputs)
            if place[0] == "args":
                changed[0][place[1]] = new
            else:
                changed[1]["__dict__"][place[1]] = new
            changes.append((rank, {"name": f"{parameter.name}={_shown(new)}", "param": parameter.name,
                                   "inputs": changed}))
        if changes:
            per_parameter.append(changes)
    # rank by rank (every parameter's first change before any parameter's second): a caller
    # taking a few sees as many parameters changed as it can
    ranks = sorted({rank for changes in per_parameter for rank, _ in changes})
    found = [change for rank in ranks for changes in per_parameter for r, change in changes if r == rank]
    return found[:limit]


def accepts(fn: Any, param: str) -> bool:
    """Whether the translation can be given ``param`` by name (or takes ``**kwargs``)."""
    signature = _signature(fn)
    if signature is None:
        return False
    parameters = signature.parameters
    return param in parameters or any(p.kind == p.VAR_KEYWORD for p in parameters.values())
