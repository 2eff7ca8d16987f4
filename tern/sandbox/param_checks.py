"""A JAX worker's Flax parameter-shape checks, answered once per initializer and arguments.

Why: at every ``apply``, Flax checks each existing parameter against the shape its
initializer would give (``Scope.param``: ``jax.eval_shape(lambda: init_fn(key, *args))``),
and each check traces the initializer again, since the lambda is new every time. In the
translated tests of ``cnn_classifier`` that was 17% of the job after an edit. Here
``jax.eval_shape`` answers that one lambda from a cache keyed by the initializer, its
arguments and JAX's trace context; the check still compares every parameter's shape with
the answer. An initializer counts as itself (held, so its identity stays its own), except a
JAX or Flax closure made by a factory (``nn.initializers.glorot_uniform()``, which a
translation writes out in ``setup``: a new closure at every apply), which counts as its
code, module and what it closes over, all a library closure computes from. An edited
module's own initializers are new objects, so they are traced again.

A shape given as a list (Flax's normalization layers) counts as its items. Any other call,
an initializer or argument that cannot be hashed, and a Flax whose
``Scope.param`` has no such lambda go to JAX as before.
"""

from __future__ import annotations

import functools
import types
from typing import Any, Callable

from tern.sandbox.memo import Memo

MAX_ENTRIES = 512
_FREE = ("init_args", "init_fn", "init_kwargs")  # what Flax's lambda closes over, sorted
_LIBRARIES = ("jax.", "flax.")  # whose closures compute from their code and cells alone
_DEPTH = 4  # closures of closures (a partial of a factory's init) followed this deep

_answers = Memo(MAX_ENTRIES)
stats = _answers.stats


def _check_code() -> Any | None:
    """The code object of the lambda ``Scope.param`` hands to ``eval_shape``."""
    try:
        from flax.core.scope import Scope
    except ImportError:
        return None
    codes = [c for c in Scope.param.__code__.co_consts
             if getattr(c, "co_name", "") == "<lambda>" and tuple(sorted(c.co_freevars)) == _FREE]
    return codes[0] if len(codes) == 1 else None


def install() -> bool:
    """Wrap ``jax.eval_shape`` once; False when Flax's check is not the expected lambda."""
    import jax

    code = _check_code()
    if code is None:
        return False
    original = jax.eval_shape
    if getattr(original, "_tern_param_checks", False):
        return True

    @functools.wraps(original)
    def eval_shape(fun: Callable, *args: Any, **kwargs: Any) -> Any:
        key = _key(fun, code) if not args and not kwargs else None
        if key is None:
            return original(fun, *args, **kwargs)
        return _answers.get(key, lambda: original(fun))

    eval_shape._tern_param_checks = True  # type: ignore[attr-defined]
    jax.eval_shape = eval_shape
    return True


def uninstall() -> None:
    """JAX's own ``eval_shape`` back, and every kept answer dropped."""
    import jax

    if getattr(jax.eval_shape, "_tern_param_checks", False):
        jax.eval_shape = jax.eval_shape.__wrapped__
    _answers.clear()


def _key(fun: Any, code: Any) -> tuple | None:
    """``(initializer, args, kwargs, trace context)`` of Flax's check, or None for any other
    function or an unhashable part."""
    if getattr(fun, "__code__", None) is not code or fun.__closure__ is None:
        return None
    from jax._src import config  # noqa: PLC2701 - the trace context (x64...) is only reachable there

    try:
        cells = dict(zip(code.co_freevars, (c.cell_contents for c in fun.__closure__)))
        key = (_initializer(cells["init_fn"], _DEPTH), _frozen(cells["init_args"]),
               _frozen(tuple(sorted(cells["init_kwargs"].items()))), config.trace_context())
        hash(key)
    except (TypeError, ValueError, KeyError):  # an array among the arguments, an empty cell
        return None
    return key


def _frozen(value: Any) -> Any:
    """``value`` hashable where it holds lists (Flax's normalization layers give their
    parameters' shapes as lists), a list told apart from a tuple of the same items."""
    if isinstance(value, list):
        return ("list", tuple(_frozen(v) for v in value))
    if isinstance(value, tuple):
        return tuple(_frozen(v) for v in value)
    return value


def _initializer(fn: Any, depth: int) -> Any:
    """What ``fn`` computes from: a library closure as its code, cells and defaults (parts
    that are functions the same way), a partial as its function and arguments, anything else
    as itself."""
    if depth and isinstance(fn, functools.partial):
        return ("partial", _initializer(fn.func, depth - 1), fn.args, tuple(sorted(fn.keywords.items())))
    module = getattr(fn, "__module__", None) or ""
    if not depth or not isinstance(fn, types.FunctionType) or not module.startswith(_LIBRARIES) or not fn.__closure__:
        return fn
    cells = tuple(_initializer(c.cell_contents, depth - 1) for c in fn.__closure__)
    return ("closure", module, fn.__qualname__, fn.__code__, cells, fn.__defaults__,
            tuple(sorted((fn.__kwdefaults__ or {}).items())))
