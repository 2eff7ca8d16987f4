"""Results kept by what the translation computes: after an edit that leaves a case's
computation as it was (a comment, another function of the module), a job names the
computation (``tern/sandbox/lowerings.py: computations_seen``) and stops, and the result of
an earlier job for that name stands.

A case's entry is keyed by everything else its result depends on (the recording, the other
side's runs, settings, versions, tern itself); within it, up to ``KEPT`` names each hold a
result. A job that could not name its computation runs in full, as before.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable

from tern.verify import keys

KEPT = 8


def name_of(*parts: Any) -> str:
    """A computation's name from the JSON-able parts that tell it (digests, shapes)."""
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


class EarlierResults:
    """Per case id, the results kept for names of its computation."""

    def __init__(self, cache: Any, kind: str, parts: dict[str, tuple], valid: Callable[[dict], bool] = lambda row: True):
        """``parts``: per case id, what its result depends on besides the computation;
        ``valid``: whether a kept result can still stand (the files it names exist)."""
        self._cache, self._kind = cache, kind
        self._keys = {ident: keys.digest(kind, *what) for ident, what in parts.items()}
        self._rows = {ident: {name: row for name, row in (cache.get(key, kind) or {}).get("rows", {}).items() if valid(row)}
                      for ident, key in self._keys.items()}

    def known(self, ident: str) -> list[str]:
        """The names an earlier result of ``ident`` is kept for."""
        return sorted(self._rows.get(ident, {}))

    def get(self, ident: str, name: str | None) -> dict | None:
        return self._rows.get(ident, {}).get(name) if name else None

    def remember(self, ident: str, name: str, row: dict) -> None:
        rows = {n: r for n, r in self._rows.get(ident, {}).items() if n != name}
        rows[name] = row
        self._rows[ident] = dict(list(rows.items())[-KEPT:])
        self._cache.put(self._keys[ident], self._kind, {"rows": self._rows[ident]})
