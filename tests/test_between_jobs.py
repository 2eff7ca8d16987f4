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


def test_a_recorded_case_is_read_once_read_only_and_a_large_one_every_time(tmp_path, monkeypatch):
    import numpy as np
    import pytest

    from tern.verify.arrays import write_case
    from tern.verify.between_jobs import recorded_case

    forget()
    write_case(tmp_path, "small", {"kind": "function", "n": [1]}, [np.arange(3.0)])
    meta, arrays = recorded_case(tmp_path, "small")
    meta["n"].append(2)  # the meta and the dict are the caller's own
    arrays["a0"] = None
    again_meta, again = recorded_case(tmp_path, "small")
    assert again_meta == {"kind": "function", "n": [1]} and again["a0"].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="read-only"):
        again["a0"][0] = 5.0  # shared between jobs: never written
    assert recorded_case(tmp_path, "small")[1]["a0"] is again["a0"]
    monkeypatch.setattr(between_jobs, "RECORDED_BYTES", 16)
    write_case(tmp_path, "large", {"kind": "function"}, [np.zeros(64)])
    first, second = recorded_case(tmp_path, "large")[1]["a0"], recorded_case(tmp_path, "large")[1]["a0"]
    assert first is not second and first.flags.writeable  # read at every call, as before
    forget()
