"""What a worker keeps between jobs (``between_jobs.py``): by key, the oldest out first,
nothing without a key."""

from __future__ import annotations

from tern.verify import between_jobs
from tern.verify.between_jobs import forget, held, kept


def test_a_key_gives_back_what_was_built_and_no_key_builds_every_time():
    forget()
    made = []
    assert kept("a", lambda: made.append(1) or "built a") == "built a"
    assert held("a") and kept("a", lambda: made.append(2) or "again") == "built a"
    assert kept(None, lambda: made.append(3) or "x") == "x" and not held(None)
    kept(None, lambda: made.append(4))
    assert made == [1, 3, 4]
    forget()
    assert not held("a")


def test_the_least_recently_used_goes_first(monkeypatch):
    forget()
    monkeypatch.setattr(between_jobs, "SIZE", 2)
    kept("a", lambda: 1)
    kept("b", lambda: 2)
    kept("a", lambda: 0)  # used again: "b" is now the oldest
    kept("c", lambda: 3)
    assert held("a") and held("c") and not held("b")
    forget()


def test_a_failed_build_keeps_nothing():
    forget()

    def broken():
        raise ValueError("weights: no kernel")

    try:
        kept("a", broken)
    except ValueError:
        pass
    assert not held("a")
