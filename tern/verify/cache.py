"""Content-addressed results in SQLite under ``.tern/``.

A key is the SHA-256 of everything a result depends on (see ``keys.py``), so a hit is
always valid and nothing needs invalidating: an edit changes the key. Values are JSON.
Writes are transactions (WAL mode), safe for several tern processes at once; a
corrupt or foreign database file is set aside, not trusted.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    value TEXT NOT NULL,
    created REAL NOT NULL
)
"""


class Cache:
    def __init__(self, state_dir: Path, enabled: bool = True):
        self.state_dir = state_dir
        self.enabled = enabled
        #: kinds read as misses (still written): e.g. re-run JAX jobs but keep recordings
        self.skip_kinds: set[str] = set()
        self.hits = 0
        self.misses = 0
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / "cache.sqlite"
        self.db = self._open()

    def _open(self) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(SCHEMA)
            return db
        except sqlite3.DatabaseError:
            self.path.replace(self.path.with_suffix(f".corrupt-{int(time.time())}"))
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(SCHEMA)
            return db

    @property
    def recordings(self) -> Path:
        return self.state_dir / "recordings"

    def get(self, key: str, kind: str = "") -> dict[str, Any] | None:
        if not self.enabled or kind in self.skip_kinds:
            self.misses += 1
            return None
        row = self.db.execute("SELECT value FROM results WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return json.loads(row[0])

    def put(self, key: str, kind: str, value: dict[str, Any]) -> None:
        self.db.execute("INSERT OR REPLACE INTO results (key, kind, value, created) VALUES (?, ?, ?, ?)",
                        (key, kind, json.dumps(value), time.time()))

    def values(self, kind: str) -> list[dict[str, Any]]:
        """Every stored value of one kind, oldest first (e.g. the agent's accepted units)."""
        rows = self.db.execute("SELECT value FROM results WHERE kind = ? ORDER BY created", (kind,)).fetchall()
        return [json.loads(row[0]) for row in rows]

    def clear(self) -> int:
        """Remove every result and recording; returns how many results there were."""
        count = self.db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        self.db.execute("DELETE FROM results")
        self.db.execute("VACUUM")
        shutil.rmtree(self.recordings, ignore_errors=True)
        shutil.rmtree(self.state_dir / "jax-cache", ignore_errors=True)
        return int(count)

    def close(self) -> None:
        self.db.close()
