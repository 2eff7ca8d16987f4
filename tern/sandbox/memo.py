"""A bounded, thread-safe table of values made once per key: the worker's in-memory caches
(lowered computations, Flax's shape checks, compiled sources) share it."""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Hashable

_ABSENT = object()


class Memo:
    """``get(key, make)``: the value made for ``key`` before, else ``make()``'s, kept; the
    ``size`` most recently used are kept. ``stats`` counts hits and misses."""

    def __init__(self, size: int, **counters: int):
        self.size = size
        self.stats = {"hits": 0, "misses": 0, **counters}
        self._entries: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        with self._lock:
            found = self._entries.get(key, _ABSENT)
            if found is not _ABSENT:
                self._entries.move_to_end(key)
                self.stats["hits"] += 1
                return found
        value = make()  # outside the lock: making may take seconds, and may use another memo
        with self._lock:
            self.stats["misses"] += 1
            self._entries[key] = value
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
