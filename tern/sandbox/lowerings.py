"""A JAX worker's compiled computations, found again by what they compute.

Why: after an edit, a translated module is imported again and every function in it is a new
object, so JAX traces it again and, its caches being keyed by the traced jaxpr's identity,
lowers and compiles it again: two thirds of a warm function replay's time and two fifths of
a search round's, for code that mostly did not change. Here ``jax._src.pjit._pjit_lower`` is wrapped by a cache keyed by the jaxpr's
*content*: its printed text (every equation, nested jaxpr, literal and parameter), the
values of its constants, its argument and result types with their weak types, every other
argument of the lowering, and JAX's trace context (x64, matmul precision...). An equal key
is the same computation, and the same compiled executable runs it.

Never cached: a jaxpr with effects, a callback (its Python function prints as a masked
address, so two different callbacks print alike), a parameter printed as an object address
or an array printed in part; a lowering with a profile-guided profiler. A key that cannot
be built leaves that one call to JAX. A JAX without these internals is left as it is.
The newest ``MAX_ENTRIES`` computations are kept (with their executables: the worker's
memory, which the pool bounds by recycling a worker after its 200th job).
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any, Iterator

from tern.sandbox.memo import Memo

MAX_ENTRIES = 128
_MASKED_ADDRESS = "0xXXXXXXXXXXXX"  # how JAX prints any object address inside a jaxpr
_UNCACHEABLE_PRIMITIVES = ("callback",)  # pure_callback, io_callback, debug_callback

_computations = Memo(MAX_ENTRIES, refused=0)
stats = _computations.stats
_watchers: list[list[tuple[str, str | None, bool]]] = []  # computations_seen's lists, innermost last


def install() -> bool:
    """Wrap JAX's jit lowering once; False when this JAX has no such internals."""
    try:
        from jax._src import config, pjit  # noqa: PLC2701 - the lowering is only reachable there
    except ImportError:
        return False
    lower = getattr(pjit, "_pjit_lower", None)
    if lower is None or getattr(lower, "_tern_by_content", False):
        return lower is not None

    def by_content(jaxpr, *args, lowering_platforms=None, lowering_parameters=None, pgle_profiler=None):
        key = None if pgle_profiler is not None else _key(jaxpr, args, lowering_platforms, lowering_parameters,
                                                          config.trace_context())
        if _watchers:
            seen_as = (args[6] if len(args) > 6 and isinstance(args[6], str) else "",
                       None if key is None else stable_digest(key), _custom_rules(jaxpr))
            for seen in _watchers:
                seen.append(seen_as)
        if key is None:
            stats["refused"] += 1
            return lower(jaxpr, *args, lowering_platforms=lowering_platforms, lowering_parameters=lowering_parameters,
                         pgle_profiler=pgle_profiler)
        return _computations.get(key, lambda: lower(jaxpr, *args, lowering_platforms=lowering_platforms,
                                                    lowering_parameters=lowering_parameters,
                                                    pgle_profiler=pgle_profiler))

    by_content._tern_by_content = True  # type: ignore[attr-defined]
    by_content.__wrapped__ = lower  # type: ignore[attr-defined]
    pjit._pjit_lower = by_content
    return True


@contextlib.contextmanager
def computations_seen() -> Iterator[list[tuple[str, str | None, bool]]]:
    """The computations JAX lowers inside the block, in order, each as ``(the jitted
    function's name, a digest of its key that another process computes alike, whether it
    calls a custom derivative rule)`` (``stable_digest``); the digest is None for one this
    cache could not tell by content, the name "" where this JAX passes none. A computation
    lowered before the block, by this function or by an earlier one (an eager operation), is
    not seen again: JAX finds it in caches of its own, by identity.

    A custom rule prints by its function's name only (``jvp=<lambda>``): the digest names
    what the computation computes, not the derivatives JAX would take of it."""
    seen: list[tuple[str, str | None, bool]] = []
    _watchers.append(seen)
    try:
        yield seen
    finally:
        _watchers.remove(seen)


def stable_digest(key: tuple) -> str | None:
    """A computation's key (``_key``) as a hex digest that names it in any process; None when
    part of it prints as an object's address."""
    text = _stable_repr(key)
    return None if " at 0x" in text else hashlib.sha256(text.encode()).hexdigest()


def _stable_repr(value: Any) -> str:
    """``repr`` with JAX's axis environment (printed by address) spelled by its content, and
    sets in a fixed order."""
    from jax._src import core  # noqa: PLC2701 - the axis environment's type is core's

    if isinstance(value, tuple):
        return "(" + ", ".join(_stable_repr(v) for v in value) + ")"
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(_stable_repr(v) for v in value)) + "}"
    if isinstance(value, core.AxisEnv):
        return (f"AxisEnv({_stable_repr(tuple(value.axis_sizes.items()))}, {_stable_repr(value.spmd_axis_names)}, "
                f"{_stable_repr(value.explicit_mesh_axis_names)})")
    return repr(value)


def uninstall() -> None:
    """JAX's own lowering back, and every kept computation dropped."""
    from jax._src import pjit  # noqa: PLC2701 - see install

    lower = getattr(pjit, "_pjit_lower", None)
    if getattr(lower, "_tern_by_content", False):
        pjit._pjit_lower = lower.__wrapped__
    _computations.clear()


def _key(jaxpr: Any, args: tuple, platforms: Any, parameters: Any, context: Any) -> tuple | None:
    """The computation's content as a hashable key, or None when it cannot be told by content."""
    try:
        if jaxpr.effects:
            return None
        text = str(jaxpr)
        if _MASKED_ADDRESS in text or "..." in text:  # an object, or an array printed in part
            return None
        values = hashlib.sha256()
        if not _digest_values(jaxpr, values):
            return None
        key = (hashlib.sha256(text.encode()).hexdigest(), values.hexdigest(), _avals(jaxpr.in_avals),
               _avals(jaxpr.out_avals), args, platforms, parameters, context)
        hash(key)
    except Exception:  # noqa: BLE001 - an unforeseen jaxpr or argument: lower it as JAX would
        return None
    return key


def _digest_values(closed: Any, digest: Any) -> bool:
    """Feed ``digest`` what the printed jaxpr leaves out: the values of its constants and of
    every nested closed jaxpr's, and its literals' (an array literal prints rounded). False
    when an equation calls back into Python."""
    from jax._src import core  # noqa: PLC2701 - jaxprs, closed jaxprs and literals are core's types

    digest_arrays(closed.consts, digest)
    todo = [closed.jaxpr]
    while todo:
        for eqn in todo.pop().eqns:
            if any(word in eqn.primitive.name for word in _UNCACHEABLE_PRIMITIVES):
                return False
            digest_arrays([v.val for v in eqn.invars if isinstance(v, core.Literal)], digest)
            for value in eqn.params.values():
                for item in value if isinstance(value, tuple) else (value,):
                    if isinstance(item, core.ClosedJaxpr):
                        digest_arrays(item.consts, digest)
                        todo.append(item.jaxpr)
                    elif isinstance(item, core.Jaxpr):
                        todo.append(item)
    return True


def _custom_rules(closed: Any) -> bool:
    """Whether the jaxpr, or one nested in it, calls a custom derivative rule."""
    from jax._src import core  # noqa: PLC2701 - see _digest_values

    todo = [getattr(closed, "jaxpr", closed)]
    while todo:
        for eqn in todo.pop().eqns:
            if eqn.primitive.name.startswith("custom_"):
                return True
            for value in eqn.params.values():
                for item in value if isinstance(value, tuple) else (value,):
                    if isinstance(item, core.ClosedJaxpr):
                        todo.append(item.jaxpr)
                    elif isinstance(item, core.Jaxpr):
                        todo.append(item)
    return False


def _avals(avals: Any) -> tuple:
    return tuple((str(a), getattr(a, "weak_type", None)) for a in avals)


def digest_arrays(arrays: Any, digest: Any) -> None:
    import jax
    import numpy as np

    for array in arrays:
        dtype = getattr(array, "dtype", None)
        if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
            digest.update(str(dtype).encode())
            array = jax.random.key_data(array)
        value = np.asarray(array)
        digest.update(f"{value.dtype}{value.shape}|".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
