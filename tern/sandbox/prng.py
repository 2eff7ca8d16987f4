"""Which JAX PRNG a job's code gets.

JAX workers default to ``rbg`` keys: the default ``threefry2x32`` compiles for seconds per new
shape on a CPU, and code that only splits keys and draws cannot tell them apart. Some of
``jax.random`` is implemented for threefry alone (``poisson`` raises ``NotImplementedError``
on any other key), so a job whose code calls one of those runs with JAX's own default, as its
user would: the sandbox's speed-up must never make a correct translation fail.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

FAST = "rbg"
JAX_DEFAULT = "threefry2x32"
THREEFRY_ONLY = (b"random.poisson",)  # jax._src.random: raises NotImplementedError for other key kinds
_MAX_FILES = 5000  # a sys_path entry this large is no translation (a site-packages): not scanned

_seen: dict[tuple[str, int, int], bool] = {}


def needs_threefry(roots: tuple[str, ...]) -> bool:
    """Whether a Python file under ``roots`` (a job's ``sys_path``) names a threefry-only
    function; each file's answer is kept by path, size and modification time."""
    files, visited = 0, set()
    for root in roots:
        for directory, dirs, names in os.walk(root, followlinks=True):  # verify's roots link to the trees
            real = os.path.realpath(directory)
            if real in visited:
                dirs[:] = []
                continue
            visited.add(real)
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
            for name in names:
                if not name.endswith(".py"):
                    continue
                files += 1
                if files > _MAX_FILES:
                    return False
                path = os.path.join(directory, name)
                try:
                    stat = os.stat(path)
                except OSError:
                    continue
                key = (path, stat.st_size, stat.st_mtime_ns)
                if key not in _seen:
                    if len(_seen) > 100_000:  # a long-lived worker over many trees
                        _seen.clear()
                    try:
                        text = Path(path).read_bytes()
                    except OSError:
                        continue
                    _seen[key] = any(marker in text for marker in THREEFRY_ONLY)
                if _seen[key]:
                    return True
    return False


@contextlib.contextmanager
def prng_for(threefry: bool) -> Iterator[str]:
    """The job runs with JAX's default PRNG when its code needs it (``needs_threefry``, asked
    before the job's guard is up), else the fast one; the worker's setting is restored after."""
    import jax

    before = jax.config.jax_default_prng_impl
    wanted = JAX_DEFAULT if threefry else FAST
    jax.config.update("jax_default_prng_impl", wanted)
    try:
        yield wanted
    finally:
        jax.config.update("jax_default_prng_impl", before)


KEY_DERIVATIONS = ("random_seed", "random_split", "random_fold_in")


def compile_key_derivations() -> bool:
    """Eager ``fold_in``, ``split`` and ``seed`` each run as one compiled call, as JAX runs any
    other primitive outside ``jit``, instead of JAX's Python implementation: for ``rbg`` keys
    that is a ``vmap`` over threefry traced again at every call, 0.46 ms against 0.08 ms, and
    Flax derives a key per layer and call (a third of an eager translated test's time).
    The bits are the same: the compiled call lowers the same integer arithmetic. False when
    this JAX has no such primitives."""
    import functools

    try:
        from jax._src import dispatch  # noqa: PLC2701 - eager primitives are dispatched there
        from jax._src.random import prng  # noqa: PLC2701 - the key primitives live there
    except ImportError:
        return False
    primitives = [getattr(prng, f"{name}_p", None) for name in KEY_DERIVATIONS]
    if any(p is None for p in primitives):
        return False
    for primitive in primitives:
        primitive.def_impl(functools.partial(dispatch.apply_primitive, primitive))
    return True
