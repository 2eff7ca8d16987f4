"""The interface a replay cannot exercise: the defaults of a layer's constructor and call.

A recorded call passes what the test passed; a default the test never leaves out is never
used, so a translation that changes it (``units: int = 33`` for Keras's 32, ``training:
bool = True``) agrees on every replay, and breaks the first user who relies on it. The
recorder keeps the defaults of the Keras class's ``__init__`` and of its ``call`` (TF
side, ``keras_defaults``); the replay compares them with the Flax module's field defaults
and ``__call__`` defaults of the same names (JAX side, ``default_checks``).

Compared only where both are plain values of one kind (numbers, booleans, strings up to
case, ``None``, tuples of them): a Keras string the translation turned into a function
(``kernel_initializer="glorot_uniform"``) is a translation's choice, not a difference.
Keras's ``training=None`` (no training context: inference) is Flax's ``False``.

Package functions the tests call are compared the same way, on their own signature, and so
is a package factory that built a replayed model (``build_model(input_shape=(32, 32, 3))``).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any

#: Keras base-layer arguments and call plumbing, not the layer's own interface
SKIPPED = frozenset({"self", "name", "dtype", "trainable", "autocast", "mask", "kwargs", "args", "parent", "inputs"})


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, (tuple, list)) and all(_plain(v) for v in value)


def _defaults(fn: Any) -> dict[str, Any]:
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    return {name: list(p.default) if isinstance(p.default, tuple) else p.default for name, p in parameters.items()
            if name not in SKIPPED and p.default is not p.empty and _plain(p.default)}


def keras_defaults(layer: Any, origin: dict, factory: Any = None) -> dict[str, dict[str, Any]]:
    """TF side: the plain defaults of the layer's constructor (a package class) or of the package
    factory that built it (``factory``), and of its call."""
    found = {"call": _defaults(layer.call)}
    if origin.get("kind") == "class":
        found["init"] = _defaults(type(layer).__init__)
    elif factory is not None:
        found["factory"] = _defaults(factory)
    return found


def _same(keras: Any, flax: Any) -> bool | None:
    """Equal, different, or None when the two are not of one kind (not compared)."""
    if isinstance(keras, (tuple, list)) and isinstance(flax, (tuple, list)):
        if len(keras) != len(flax):
            return False
        verdicts = [_same(k, f) for k, f in zip(keras, flax)]
        return None if None in verdicts else all(verdicts)
    if keras is None or flax is None:
        return True if keras is flax else None
    if isinstance(keras, bool) or isinstance(flax, bool):
        return keras is flax if isinstance(keras, bool) and isinstance(flax, bool) else None
    if isinstance(keras, (int, float)) and isinstance(flax, (int, float)):
        return math.isclose(keras, flax, rel_tol=1e-9, abs_tol=0.0)
    if isinstance(keras, str) and isinstance(flax, str):
        return keras.lower() == flax.lower()
    return None


def same_default(name: str, keras: Any, flax: Any) -> bool | None:
    """Whether parameter ``name`` defaults alike on both sides; None: not of one kind, not compared."""
    if name == "training" and keras is None:
        keras = False  # Keras's "not in a training context" is inference, Flax's False
    return _same(keras, flax)


def function_defaults(fn: Any) -> dict[str, dict[str, Any]]:
    """TF side: the plain defaults of a package function."""
    return {"call": _defaults(fn)}


def _signature_defaults(fn: Any) -> dict[str, Any]:
    try:
        return {name: p.default for name, p in inspect.signature(fn).parameters.items() if p.default is not p.empty}
    except (TypeError, ValueError):
        return {}


def default_checks(module: Any, recorded: dict[str, dict[str, Any]], factory: Any = None) -> list[dict]:
    """JAX side: one check per default both sides have as plain values of one kind; ``module``
    a Flax module (its fields and ``__call__``) or a translated function; ``factory`` the
    translated package function that built the module, if one did."""
    if inspect.isfunction(module) or not dataclasses.is_dataclass(module):
        fields, call = {}, _signature_defaults(module)
    else:
        fields = {f.name: f.default for f in dataclasses.fields(type(module)) if f.default is not dataclasses.MISSING}
        call = _signature_defaults(type(module).__call__)
    checks = []
    made = _signature_defaults(factory) if factory is not None else {}
    for where, key, theirs in (("constructor", "init", fields), ("call", "call", call), ("factory", "factory", made)):
        for name, keras in recorded.get(key, {}).items():
            if name not in theirs or name in SKIPPED or not _plain(theirs[name]):
                continue
            same = same_default(name, keras, theirs[name])
            if same is None:
                continue
            check = {"name": f"default of {name} ({where})", "ok": same}
            if not same:
                check["problem"] = f"{theirs[name]!r} in the translation, Keras has {keras!r}"
            checks.append(check)
    return checks
