"""Name resolution's fast path must agree with the slow, obvious one.

``source_facts`` computes every function's bound names with Python's ``ast`` ahead of the
LibCST pass; ``function_scope`` walks the LibCST node. On every function and lambda of
the fixtures and of Tern's own sources, both must give the same answer.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from tern.engine.names import function_scope, source_facts

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted([*(ROOT / "fixtures" / "tf").rglob("*.py"), *(ROOT / "tern").rglob("*.py"), *(ROOT / "rules").rglob("*.py")])


class _Functions(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found = []

    def visit_FunctionDef(self, node) -> None:
        self.found.append(node)

    def visit_Lambda(self, node) -> None:
        self.found.append(node)


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(ROOT).as_posix() for p in FILES])
def test_precomputed_scopes_match_the_cst_walk(path):
    source = path.read_text()
    facts = source_facts(source)
    visitor = _Functions()
    cst.parse_module(source).visit(visitor)
    for node in visitor.found:
        assert facts.take_scope(node) == function_scope(node), cst.Module([]).code_for_node(node)[:200]


def test_shadowing_through_every_binding_form():
    source = (
        "import tensorflow as tf\n"
        "def f(a, *b, c=1, **d):\n"
        "    e = 1\n    (g, [h]) = 2, [3]\n    for i in []: pass\n    with x as j: pass\n"
        "    try: pass\n    except E as k: pass\n    [m for m in []]\n    import numpy as tf\n"
        "    def n(): pass\n    class o: pass\n    lambda p: p\n"
    )
    facts = source_facts(source)
    fn = cst.parse_module(source).body[1]
    bound, imports = facts.take_scope(fn)
    assert bound == set("abcdeghijkmno") and imports == {"tf": "numpy"}
    assert "tf" in facts.candidates
