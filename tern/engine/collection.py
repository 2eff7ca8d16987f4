"""Python's cyclic garbage collector paused while one file is translated, and that file's
garbage collected when it is done.

Translating a file makes millions of short-lived objects (LibCST nodes, rebuilt trees), many
of them alive for the whole file. The collector counts them as survivors and runs full
collections, each walking every object in the process, the rule tables and the file's
trees included: on 400 Keras source files that was 40% of the run. Paused, the file's
objects are collected once, youngest generation only, when the file is done. Memory then
peaks at one file's garbage more.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


def one_file() -> contextlib.AbstractContextManager[None]:
    """Collect the cycles of what runs inside once, at the end (nested uses: the outermost
    collects; a collector the caller disabled stays disabled)."""
    return _collector_off(collect_young=True)


def paused() -> contextlib.AbstractContextManager[None]:
    """The collector off inside and back on after, with no collection: for work that makes
    no cyclic garbage and keeps what it makes (the package scan's syntax trees). A collection
    at the end would only walk all of it to find it alive; ``settled`` then freezes it."""
    return _collector_off(collect_young=False)


@contextlib.contextmanager
def _collector_off(collect_young: bool) -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if collect_young:
                # before the collector is back on: its count of new objects (the whole file's)
                # is then reset, and the next allocation does not start a collection of its
                # own, nor, every tenth file or so, a full one over every object in the process
                gc.collect(0)
            gc.enable()


@contextlib.contextmanager
def settled() -> Iterator[None]:
    """What exists on entry outlives what runs inside (a run's package facts: every module's
    syntax tree): the collector leaves it alone until the end. Else each full collection walks
    all of it again, and in forked workers writes to every page of it."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
