"""What a verify result's key reads of the package (tern/verify/keys.py): the imports of a file,
wherever they stand in it."""

from __future__ import annotations

import ast
from pathlib import Path

from tern.verify.keys import imported_names

ROOT = Path(__file__).resolve().parents[1]

NESTED = b'''
import a
if x:
    import b
else:
    from c import d
try:
    import e
except ImportError:
    import f
else:
    import g
finally:
    import h
with m:
    import i
for _ in y:
    import j
while z:
    import k
class K:
    import l
    def method(self):
        async def inner():
            from .sibling import n
match v:
    case 1:
        import o
lambda: __import__("not_a_statement")
'''


def test_a_file_in_any_encoding_or_with_any_newlines_gives_its_imports():
    text = "import os\nfrom pkg import sub\nname = 'caf\u00e9'\n"
    expected = ("os", "pkg", "pkg.sub")
    assert imported_names(text.encode(), ()) == expected
    assert imported_names(b"\xef\xbb\xbf" + text.encode(), ()) == expected  # a byte-order mark
    assert imported_names(text.replace("\n", "\r\n").encode(), ()) == expected
    assert imported_names(text.replace("\n", "\r").encode(), ()) == expected
    assert imported_names(("# -*- coding: latin-1 -*-\n" + text).encode("latin-1"), ()) == expected
    assert imported_names(b"import (", ()) == ()  # no Python: no imports, no error


def _walked(source: bytes, current: tuple[str, ...]) -> set[str]:
    """Every Import and ImportFrom node of the whole tree, expressions included."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(imported_names(ast.unparse(node).encode(), current))
    return names


def test_imports_at_any_depth_are_found():
    assert set(imported_names(NESTED, ("pkg",))) == {
        "a", "b", "c", "c.d", "e", "f", "g", "h", "i", "j", "k", "l", "pkg.sibling", "pkg.sibling.n", "o"}


def test_every_fixture_file_gives_what_a_walk_of_its_whole_tree_gives():
    files = sorted((ROOT / "fixtures").rglob("*.py"))
    assert len(files) > 250
    for path in files:
        source = path.read_bytes()
        assert set(imported_names(source, ("pkg", "sub"))) == _walked(source, ("pkg", "sub")), path
