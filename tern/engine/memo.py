"""Translations a long-lived process keeps, so that a rerun translates only what changed.

Why: the daemon answers ``tern migrate`` for an agent that edits one file and migrates
again; translating every file of the package each time costs 30–70 ms a file. A file's
translation is a function of its bytes, its path in the package, the package facts the
pre-pass found (``PackageInfo``) and how it imports the support module, with the rule
tables fixed for the life of the process (the daemon stops answering once tern's sources
change). So the result is kept under those, and a hit is the same result.

The package facts are keyed by a digest of their pickle, with every ``ast`` node in them
written as ``ast.dump`` (structure without positions): an edit that only moves the lines
of another module keeps the key. Rules compare positions only within one function, where
the structure fixes their order; positions a fact stores as numbers are in the digest.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import io
import pickle
from collections import OrderedDict
from typing import Callable

from tern.engine.package import PackageInfo
from tern.engine.report import FileResult

Outcome = tuple[FileResult, "bytes | None"]


class _FactsPickler(pickle.Pickler):
    def reducer_override(self, obj):
        if isinstance(obj, ast.AST):
            return str, (ast.dump(obj),)
        return NotImplemented


def package_digest(info: PackageInfo) -> str | None:
    """A digest of the package facts, or None when they cannot be pickled (then nothing is kept)."""
    buffer = io.BytesIO()
    try:
        _FactsPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(info)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return None
    return hashlib.sha256(buffer.getvalue()).hexdigest()


class TranslationMemo:
    """The last ``capacity`` file translations, least recently used dropped first."""

    def __init__(self, capacity: int = 4096):
        self.capacity = capacity
        self._kept: OrderedDict[tuple, Outcome] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def translate(self, key: tuple | None, compute: Callable[[], Outcome]) -> Outcome:
        """``compute()``'s outcome, or the one kept under ``key`` (None: not kept). Every answer
        is a copy: the caller may change the result it gets."""
        if key is None:
            self.misses += 1
            return compute()
        kept = self._kept.get(key)
        if kept is None:
            self.misses += 1
            kept = compute()
            self._kept[key] = kept
            if len(self._kept) > self.capacity:
                self._kept.popitem(last=False)
        else:
            self.hits += 1
            self._kept.move_to_end(key)
        return copy.deepcopy(kept[0]), kept[1]

    def __len__(self) -> int:
        return len(self._kept)
