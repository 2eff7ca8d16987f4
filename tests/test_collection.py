"""``tern.engine.collection.one_file``: the collector paused inside, the file's cycles
collected after, and a caller's own setting kept."""

from __future__ import annotations

import gc
import weakref

from tern.engine.collection import one_file


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


def test_nested_uses_collect_once_at_the_outermost():
    with one_file():
        with one_file():
            dead = _cycle()
        assert not gc.isenabled()  # the inner use leaves the pause to the outer one
        assert dead() is not None
    assert gc.isenabled() and dead() is None


def test_a_collector_the_caller_disabled_stays_disabled():
    gc.disable()
    try:
        with one_file():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_an_exception_inside_still_resumes_the_collector():
    try:
        with one_file():
            raise ValueError("a rule failed")
    except ValueError:
        pass
    assert gc.isenabled()
