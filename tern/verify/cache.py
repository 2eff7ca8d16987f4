"""Content-addressed results in SQLite under ``.tern/``.

A key is the SHA-256 of everything a result depends on (see ``keys.py``), so a hit is
always valid and nothing needs invalidating: an edit changes the key. Values are JSON.
Writes are transactions (WAL mode), safe for several tern processes at once. A commit does
not wait for the disk (``synchronous=NORMAL``, SQLite's setting for WAL): a power cut may
lose the last results, which the next run makes again, and never damages the store; a
verify after an edit commits one result per job, each an fsync before. A damaged
or foreign database file (SQLite reports it corrupt, or not a database, when it is opened or
at any later query) is set aside under a name that says so, with a message naming it, and
the run goes on with an empty store: a cache is never a reason to fail.

With ``TERN_RECORDINGS`` set (``sandbox/shared_state.py``), the TF side's results
(``TF_KINDS``) and their directories are kept there instead, in a store of the same kind that
other projects read and add to; everything else stays the project's.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

from tern.sandbox.shared_state import RECORDINGS_ENV, shared_dir

T = TypeVar("T")
#: results made by TF jobs alone, from the original package: whatever they depend on (the
#: original's files, the TF libraries, tern's code, the verify settings) is in their keys
TF_KINDS = frozenset({"record", "keras_inits", "reference", "samples"})
LOCK_TIMEOUT = 30.0  # seconds a write waits for another process's transaction

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    value TEXT NOT NULL,
    created REAL NOT NULL
)
"""


class Cache:
    def __init__(self, state_dir: Path, enabled: bool = True, *, share: bool = True):
        """``share``: keep ``TF_KINDS`` in ``$TERN_RECORDINGS``'s store when it is set."""
        self.state_dir = state_dir
        self.enabled = enabled
        #: kinds read as misses (still written): e.g. re-run JAX jobs but keep recordings
        self.skip_kinds: set[str] = set()
        self.hits = 0
        self.misses = 0
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / "cache.sqlite"
        #: what was wrong with the store and what was done about it (also written to stderr)
        self.notices: list[str] = []
        self.db = self._open()
        shared = shared_dir(RECORDINGS_ENV) if share else None
        self.shared = Cache(shared, enabled, share=False) if shared and shared != state_dir.resolve() else None

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT, isolation_level=None)
        deadline = time.monotonic() + LOCK_TIMEOUT
        while True:
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")  # per connection: commits without an fsync each
                db.execute(SCHEMA)
                return db
            except sqlite3.OperationalError as exc:
                # Two tern processes opening a new store at once: SQLite answers "locked" to
                # the journal-mode switch at once, without waiting on its busy timeout.
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    db.close()
                    raise
                time.sleep(0.02)

    def _open(self) -> sqlite3.Connection:
        try:
            db = self._connect()
            verdict = db.execute("PRAGMA quick_check").fetchone()[0]  # pages damaged behind an intact header
            if verdict != "ok":
                db.close()
                raise sqlite3.DatabaseError(f"integrity check: {verdict.splitlines()[-1].strip()[:120]}")
            return db
        except sqlite3.DatabaseError as exc:
            if not _damaged(exc):
                raise
            return self._set_aside(exc)

    def _set_aside(self, exc: sqlite3.DatabaseError) -> sqlite3.Connection:
        """Keep the damaged file (and its WAL) under a new name, say so, start an empty store."""
        aside = self.path.with_name(f"{self.path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        n = 1
        while aside.exists():
            n += 1
            aside = aside.with_name(f"{self.path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
        for suffix in ("-wal", "-shm", ""):
            part = self.path.with_name(self.path.name + suffix)
            if part.exists():
                part.replace(aside.with_name(aside.name + suffix))
        message = f"the cache {self.path} is damaged ({exc}): kept as {aside.name}, continuing with an empty cache"
        self.notices.append(message)
        sys.stderr.write(f"warning: {message}\n")
        return self._connect()

    def _query(self, run: Callable[[sqlite3.Connection], T]) -> T:
        """``run(db)``; on damage found mid-run, once more on a fresh store."""
        try:
            return run(self.db)
        except sqlite3.DatabaseError as exc:
            if not _damaged(exc):
                raise
            try:
                self.db.close()
            except sqlite3.Error:
                pass
            self.db = self._set_aside(exc)
            return run(self.db)

    @property
    def recordings(self) -> Path:
        return self.state_dir / "recordings"

    def store(self, kind: str) -> "Cache":
        """Where results of ``kind`` are kept: the shared store for ``TF_KINDS`` when there is one."""
        return self.shared if self.shared is not None and kind in TF_KINDS else self

    def recordings_for(self, kind: str) -> Path:
        """The directory for the files a job of ``kind`` made, beside its result."""
        return self.store(kind).recordings

    def get(self, key: str, kind: str = "") -> dict[str, Any] | None:
        if not self.enabled or kind in self.skip_kinds:
            self.misses += 1
            return None
        row = self.store(kind)._query(lambda db: db.execute("SELECT value FROM results WHERE key = ?", (key,)).fetchone())
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return json.loads(row[0])

    def put(self, key: str, kind: str, value: dict[str, Any]) -> None:
        row = (key, kind, json.dumps(value), time.time())
        self.store(kind)._query(lambda db: db.execute("INSERT OR REPLACE INTO results (key, kind, value, created) VALUES (?, ?, ?, ?)", row))

    def values(self, kind: str) -> list[dict[str, Any]]:
        """Every stored value of one kind, oldest first (e.g. the agent's accepted units)."""
        rows = self.store(kind)._query(
            lambda db: db.execute("SELECT value FROM results WHERE kind = ? ORDER BY created", (kind,)).fetchall())
        return [json.loads(row[0]) for row in rows]

    def clear(self) -> int:
        """Remove every result and recording of the project; returns how many results there were
        (0 when the store was damaged: it is set aside, which empties it too). A shared store is
        other projects' too: left alone."""
        def empty(db: sqlite3.Connection) -> int:
            count = db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
            db.execute("DELETE FROM results")
            db.execute("VACUUM")
            return count

        notices = len(self.notices)
        count = self._query(empty)
        if len(self.notices) > notices:
            count = 0
        shutil.rmtree(self.recordings, ignore_errors=True)
        shutil.rmtree(self.state_dir / "jax-cache", ignore_errors=True)
        return int(count)

    def close(self) -> None:
        self.db.close()
        if self.shared is not None:
            self.shared.close()


def _damaged(exc: sqlite3.DatabaseError) -> bool:
    """Corrupt or not a database at all; a locked or busy store is not damaged (it is waited for)."""
    return getattr(exc, "sqlite_errorname", "") in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or type(exc) is sqlite3.DatabaseError
