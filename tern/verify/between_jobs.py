"""What a worker keeps from one job to the next: objects built from content-addressed
inputs only, under a key that names all of those inputs.

A search (``search.py``) is a chain of jobs, JAX and TF in turn, that the pool's affinity
sends to the same workers. Each JAX round imported the translation again, ported the
weights and traced and compiled its float64 step (0.2-0.3 s a round on the fixtures);
each TF round rebuilt the Keras layer. Kept here, a later round reuses them. A key must
name everything the object was built from (the translation's location and closure hash,
the recording's directory, whose name is its content's hash, the case): a key naming less
would judge a stale translation. The worker purges the translation's modules after every
job as before; a kept object holds the functions it was built from, unchanged since their
files are.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Hashable

from tern.sandbox.memo import Memo
from tern.verify.arrays import read_case

#: objects kept per worker process; the oldest goes first (each holds a case's arrays and
#: compiled steps: a few MB at most for fixture-sized layers)
SIZE = 64

_kept: OrderedDict[Hashable, Any] = OrderedDict()
#: recorded cases read (``recorded_case``): a package's cases, each kept if its arrays'
#: file is at most ``RECORDED_BYTES`` (a worker keeps 256 MB of them at most)
_recorded = Memo(128)
RECORDED_BYTES = 2 << 20


def kept(key: Hashable | None, make: Callable[[], Any]) -> Any:
    """``make()``, or what it gave last time under ``key``; None as key keeps nothing."""
    if key is None:
        return make()
    if key in _kept:
        _kept.move_to_end(key)
        return _kept[key]
    value = make()
    _kept[key] = value
    while len(_kept) > SIZE:
        _kept.popitem(last=False)
    return value


def held(key: Hashable | None) -> bool:
    """Whether ``kept(key, ...)`` would give back what an earlier job built."""
    return key is not None and key in _kept


def forget() -> None:
    """Drop everything kept (tests; a worker about to be reused for something else)."""
    _kept.clear()
    _recorded.clear()


def recorded_case(directory: Path, name: str) -> tuple[dict, dict]:
    """``read_case`` of a recording, whose directory is named by its content's hash and never
    written again: its arrays are read once per worker (loading a case's ``.npz`` was a
    quarter of a first search round), unless they are large. The arrays come back read-only
    and shared, the meta and the dict fresh: a job may change those, not what the next job
    reads."""
    try:
        small = (directory / f"{name}.npz").stat().st_size <= RECORDED_BYTES
    except OSError:
        small = False  # read_case says what is missing
    if not small:
        return read_case(directory, name)
    meta_text, arrays = _recorded.get((str(directory), name), lambda: _read_once(directory, name))
    return json.loads(meta_text), dict(arrays)


def _read_once(directory: Path, name: str) -> tuple[str, dict]:
    meta, arrays = read_case(directory, name)
    for array in arrays.values():
        array.flags.writeable = False
    return json.dumps(meta), arrays
