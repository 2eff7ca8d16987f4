"""``ast.parse`` of a package's files, kept by their text.

A long-lived process (the daemon) reads the files of the packages it verifies again on every
verify (what TF a translation keeps, the static defaults, what a test imports, what a
file imports for its key), and after an
edit most of them did not change. ``tern.engine.names.parsed`` keeps the last few texts only:
the engine's are whole modules, each met once.
"""

from __future__ import annotations

import ast
import functools


@functools.lru_cache(maxsize=256)
def parsed_file(text: str) -> ast.Module:
    """``ast.parse(text)``; callers read the tree and never change it."""
    return ast.parse(text)
