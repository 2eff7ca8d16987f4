"""Code objects of a worker's unchanged sources, compiled once per source text.

Why: a worker forgets a package's modules after every job, and the translated tests' job
imports them again, each through a parser and a compiler: the marking loader
(``files_run.py``) never uses ``__pycache__``, and pytest cannot write its rewritten test
files' bytecode into a read-only translation. After a one-line edit that was 13 ms of
``custom_dense``'s 135 ms tests job for the modules that did not change. A code object is
immutable and made from the source, the path and the transformation alone, so it is kept
under exactly those (pytest's: its assertion-pass hook too, the one setting its rewrite
reads) and executed into each new module as a ``.pyc`` would be.
"""

from __future__ import annotations

import ast
import collections
import os
import types
from pathlib import Path
from typing import Any, Callable

from tern.sandbox.memo import Memo

MAX_ENTRIES = 256  # source files; a code object is a few times its source's size

_codes = Memo(MAX_ENTRIES)
stats = _codes.stats
made: collections.Counter[str] = collections.Counter()  # per path, the code objects compiled


def compiled(kind: str, path: str, source: bytes, make: Callable[[], types.CodeType], *extra: Any) -> types.CodeType:
    """``make()``'s code object for ``source`` at ``path``, made once per ``kind`` of
    transformation (and ``extra``, what else it reads)."""

    def counted() -> types.CodeType:
        made[path] += 1
        return make()

    return _codes.get((kind, path, source, *extra), counted)


def keep_pytest_rewrites() -> bool:
    """Pytest's assertion rewriting of a test file, kept by its text (once per process);
    False when this pytest has no ``_rewrite_test`` of the expected shape."""
    from _pytest.assertion import rewrite  # noqa: PLC2701 - the rewriter has no public hook

    original = getattr(rewrite, "_rewrite_test", None)
    if original is None or not hasattr(rewrite, "rewrite_asserts"):
        return False
    if getattr(original, "_tern_kept", False):
        return True

    def _rewrite_test(fn: Path, config: Any) -> tuple[os.stat_result, types.CodeType]:
        """As pytest's, from the one text read: the key is what was compiled."""
        stat, source, name = os.stat(fn), fn.read_bytes(), str(fn)

        def make() -> types.CodeType:
            tree = ast.parse(source, filename=name)
            rewrite.rewrite_asserts(tree, source, name, config)
            return compile(tree, name, "exec", dont_inherit=True)

        return stat, compiled("pytest", name, source, make, bool(config.getini("enable_assertion_pass_hook")))

    _rewrite_test._tern_kept = True  # type: ignore[attr-defined]
    _rewrite_test.__wrapped__ = original  # type: ignore[attr-defined]
    rewrite._rewrite_test = _rewrite_test
    return True


def forget() -> None:
    """Drop every kept code object (tests)."""
    _codes.clear()
    made.clear()
