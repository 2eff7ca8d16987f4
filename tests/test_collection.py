"""``tern.engine.collection``: ``one_file`` pauses the collector inside and collects the file's
cycles after; ``paused`` resumes it with no collection, for the package scan, which makes no
cycles; both keep a caller's own setting."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

from tern.engine.collection import one_file, paused
from tern.engine.package import scan_package


class _Node:
    pass


def _cycle() -> weakref.ref:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_paused_inside_and_collected_after():
    assert gc.isenabled()
    with one_file():
        assert not gc.isenabled()
        dead = _cycle()
        assert dead() is not None  # a cycle outlives its last reference while paused
    assert gc.isenabled()
    assert dead() is None  # and is collected when the file is done


def test_one_young_collection_per_file_and_none_started_by_the_next_allocation():
    """Collected after the collector was back on, the file's objects (all counted as new)
    started a collection of their own at the next allocation, and every tenth file or so a
    full one over the whole process."""
    seen: list[int] = []

    def record(phase, info):
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(record)
    try:
        for _ in range(30):
            with one_file():
                kept = [[i] for i in range(5_000)]  # far more new objects than a collection waits for
            after = [[i] for i in range(50)]  # what the caller allocates next
    finally:
        gc.callbacks.remove(record)
    assert kept and after
    assert seen == [0] * 30


def test_nested_uses_collect_once_at_the_outermost():
    with one_file():
        with one_file():
            dead = _cycle()
        assert not gc.isenabled()  # the inner use leaves the pause to the outer one
        assert dead() is not None
    assert gc.isenabled() and dead() is None


@pytest.mark.parametrize("pause", [one_file, paused])
def test_a_collector_the_caller_disabled_stays_disabled(pause):
    gc.disable()
    try:
        with pause():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("pause", [one_file, paused])
def test_an_exception_inside_still_resumes_the_collector(pause):
    try:
        with pause():
            raise ValueError("a rule failed")
    except ValueError:
        pass
    assert gc.isenabled()


def test_paused_resumes_the_collector_without_collecting():
    with paused():
        assert not gc.isenabled()
        alive = _cycle()
    assert gc.isenabled()
    assert alive() is not None  # no collection on the way out: the next one takes it
    gc.collect()
    assert alive() is None


def test_the_package_scan_makes_no_cyclic_garbage():
    """What ``paused`` around ``scan_package`` relies on: nothing is left for a collection."""
    root = Path(__file__).resolve().parents[1] / "fixtures" / "tf"
    scan_package(root, sorted(root.rglob("*.py")))  # first use: rule tables and features imported
    gc.collect()
    gc.disable()
    try:
        info = scan_package(root, sorted(root.rglob("*.py")))
        assert info.classes and gc.collect() == 0
    finally:
        gc.enable()
