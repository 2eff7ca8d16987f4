"""``TERN_RECORDINGS``: the TF side's results kept in one store that projects share, the rest
of the cache each project's own (``tern/verify/cache.py``)."""

from pathlib import Path

import pytest

from tern.verify.cache import TF_KINDS, Cache


@pytest.fixture
def shared(tmp_path, monkeypatch) -> Path:
    store = tmp_path / "shared"
    monkeypatch.setenv("TERN_RECORDINGS", str(store))
    return store


def test_tf_results_are_shared_and_jax_results_stay_in_their_project(tmp_path, shared):
    one, other = Cache(tmp_path / "one" / ".tern"), Cache(tmp_path / "other" / ".tern")
    for kind in sorted(TF_KINDS):
        one.put(f"k-{kind}", kind, {"made": kind})
    one.put("k-replay", "replay", {"made": "replay"})
    one.put("k-search", "search", {"made": "search"})  # TF and JAX rounds over a translation: the project's
    assert {kind: other.get(f"k-{kind}", kind) for kind in TF_KINDS} == {kind: {"made": kind} for kind in TF_KINDS}
    assert other.get("k-replay", "replay") is None and other.get("k-search", "search") is None
    assert one.get("k-replay", "replay") == {"made": "replay"}
    assert (other.hits, other.misses) == (len(TF_KINDS), 2)  # the shared store's hits count as the project's
    assert other.recordings_for("record") == shared / "recordings"
    assert other.recordings_for("search") == other.recordings == tmp_path / "other" / ".tern" / "recordings"
    assert (shared / "cache.sqlite").is_file()


def test_no_cache_and_skipped_kinds_miss_the_shared_store_too(tmp_path, shared):
    Cache(tmp_path / "one" / ".tern").put("k", "record", {"made": 1})
    assert Cache(tmp_path / "two" / ".tern", enabled=False).get("k", "record") is None
    skipping = Cache(tmp_path / "three" / ".tern")
    skipping.skip_kinds = {"record"}
    assert skipping.get("k", "record") is None


def test_clearing_a_project_leaves_the_shared_store_alone(tmp_path, shared):
    one = Cache(tmp_path / "one" / ".tern")
    one.put("k", "record", {"made": 1})
    one.put("j", "replay", {"made": 2})
    assert one.clear() == 1  # the project's one result
    assert one.get("j", "replay") is None and one.get("k", "record") == {"made": 1}


def test_without_the_variable_every_result_is_the_projects(tmp_path, monkeypatch):
    monkeypatch.delenv("TERN_RECORDINGS", raising=False)
    one, other = Cache(tmp_path / "one" / ".tern"), Cache(tmp_path / "other" / ".tern")
    one.put("k", "record", {"made": 1})
    assert other.get("k", "record") is None and one.get("k", "record") == {"made": 1}
    assert one.recordings_for("record") == tmp_path / "one" / ".tern" / "recordings"
