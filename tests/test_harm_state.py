"""State that heals, and no thread-unsafe parsing: tern's own files never make it fail.

* A cache whose header is intact but whose pages are damaged, a file that is no database
  at all, and damage that appears while a run has the store open: each is set aside under
  a name that says so, with a message naming it, and the run goes on with an empty store.
  ``tern cache clear`` works whatever the file holds.
* A process killed right after its commits loses none of them (commits wait for no fsync).
* ``tern eval`` migrates its cases in worker processes, never in threads beside its event
  loop (CPython 3.11's ``ast`` breaks when two threads parse at once).
"""

from __future__ import annotations

import ast
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tern.verify.cache import Cache

ROOT = Path(__file__).resolve().parents[1]


def _filled(state: Path, rows: int = 1500) -> Path:
    cache = Cache(state)
    for i in range(rows):
        cache.put(f"key{i}", "replay", {"status": "equivalent", "pad": "x" * 200})
    cache.close()
    db = sqlite3.connect(state / "cache.sqlite")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every row in the main file
    db.close()
    return state / "cache.sqlite"


def _damage_pages(path: Path) -> None:
    """Overwrite part of every page after the first two: the header still says SQLite."""
    data = bytearray(path.read_bytes())
    for offset in range(8192, len(data), 4096):
        data[offset + 100:offset + 400] = b"\xff" * 300
    path.write_bytes(bytes(data))


def _aside(state: Path) -> list[Path]:
    return sorted(state.glob("cache.sqlite.damaged-*"))


def test_results_committed_before_a_kill_are_kept_and_commits_do_not_wait_for_the_disk(tmp_path):
    """WAL with ``synchronous=NORMAL``: a commit waits for no fsync, and a process killed
    right after its commits loses none of them (only a power cut could)."""
    script = ("import os, signal, sys\nfrom pathlib import Path\nfrom tern.verify.cache import Cache\n"
              "cache = Cache(Path(sys.argv[1]))\n"
              "assert cache.db.execute('PRAGMA synchronous').fetchone()[0] == 1\n"  # NORMAL
              "for i in range(50):\n    cache.put(f'key{i}', 'replay', {'i': i})\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    cache = Cache(tmp_path)
    assert cache.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert [cache.get(f"key{i}", "replay") for i in range(50)] == [{"i": i} for i in range(50)]
    cache.close()


def test_damaged_pages_behind_an_intact_header_are_set_aside_with_a_message(tmp_path, capsys):
    state = tmp_path / ".tern"
    _damage_pages(_filled(state))
    damaged = (state / "cache.sqlite").read_bytes()
    cache = Cache(state)
    assert cache.get("key5") is None  # a fresh store: nothing is trusted
    cache.put("new", "replay", {"status": "equivalent"})
    assert cache.get("new") == {"status": "equivalent"}
    (kept,) = _aside(state)
    assert kept.read_bytes() == damaged  # kept as it was, for a person to look at
    assert cache.notices and kept.name in cache.notices[0]
    assert kept.name in capsys.readouterr().err


def test_a_file_that_is_no_database_is_set_aside_with_a_message(tmp_path, capsys):
    state = tmp_path / ".tern"
    state.mkdir()
    (state / "cache.sqlite").write_bytes(os.urandom(8192))
    cache = Cache(state)
    cache.put("k", "replay", {"v": 1})
    assert cache.get("k") == {"v": 1}
    assert len(_aside(state)) == 1
    assert "damaged" in capsys.readouterr().err


def test_damage_that_appears_mid_run_heals_on_the_next_query(tmp_path):
    state = tmp_path / ".tern"
    path = _filled(state)
    cache = Cache(state)  # opened while healthy
    _damage_pages(path)
    cache.db.execute("PRAGMA cache_size=0")  # no page it already read is served from memory
    for i in range(0, 1500, 50):  # some query meets a damaged page: that one and every later one go on
        cache.get(f"key{i}")
    cache.put("after", "replay", {"v": 2})
    assert cache.get("after") == {"v": 2}
    assert len(_aside(state)) == 1 and cache.notices


def test_a_locked_store_is_not_taken_for_a_damaged_one(tmp_path):
    state = tmp_path / ".tern"
    _filled(state, rows=3)
    holder = sqlite3.connect(state / "cache.sqlite", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        cache = Cache.__new__(Cache)
        cache.state_dir, cache.path, cache.notices = state, state / "cache.sqlite", []
        cache.db = sqlite3.connect(cache.path, timeout=0.1, isolation_level=None)
        with pytest.raises(sqlite3.OperationalError):
            cache._query(lambda db: db.execute("INSERT INTO results VALUES ('k', 'x', '{}', 0)"))  # a writer waits
        assert not _aside(state)
    finally:
        holder.execute("ROLLBACK")


@pytest.mark.parametrize("damage", ["pages", "garbage"])
def test_cache_clear_always_works(tmp_path, damage):
    project = tmp_path / "project"
    state = project / ".tern"
    if damage == "pages":
        _damage_pages(_filled(state))
    else:
        state.mkdir(parents=True)
        (state / "cache.sqlite").write_bytes(b"SQLite format 3\x00" + os.urandom(5000))
    (state / "recordings" / "abc").mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-m", "tern", "cache", "clear", "--project", str(project)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "damaged" in proc.stderr and "cache.sqlite.damaged-" in proc.stderr
    assert not (state / "recordings").exists()
    again = subprocess.run([sys.executable, "-m", "tern", "cache", "clear", "--project", str(project)],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "damaged" not in again.stderr  # healed: a plain clear now


def test_eval_migrates_many_packages_at_once_in_processes_while_the_loop_parses(tmp_path):
    """Twelve packages migrate in eval's pool while this process's threads parse with ``ast``
    at full speed: every migration succeeds, and none ran in this process."""
    from tern.evaluation.llm import LlmSetup
    from tern.evaluation.run import Options, start_migrations
    from tern.evaluation.suite import Case

    cases = []
    for i in range(12):
        name = ("custom_dense", "mlp_sequential", "train_regularized")[i % 3]
        copy = tmp_path / "suite" / f"case{i}" / name
        shutil.copytree(ROOT / "fixtures" / "tf" / name, copy)
        cases.append(Case(suite="stress", name=f"case{i}", path=copy))
    options = Options(project=tmp_path, run_dir=tmp_path / "run", llm=LlmSetup(config=None, line="rules"), jobs=2)
    pool, futures = start_migrations(cases, options)
    assert pool is not None
    stop = threading.Event()
    source = (ROOT / "tern" / "engine" / "translate.py").read_text()

    def parse() -> None:
        while not stop.is_set():
            ast.parse(source)

    threads = [threading.Thread(target=parse)]  # one: two threads parsing at once is the bug itself
    for thread in threads:
        thread.start()
    try:
        results = {case_id: future.result(timeout=600) for case_id, future in futures.items()}
        workers = set(pool._processes or ())
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        pool.shutdown()
    assert all(not r.crash for r in results.values()), {k: r.crash for k, r in results.items() if r.crash}
    assert workers and os.getpid() not in workers
    assert len(list((tmp_path / "run" / "translations" / "stress").glob("case*/*/_keras_compat.py"))) == 12
