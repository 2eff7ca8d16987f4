"""``tern.engine.results.code``/``module_code``/``ModuleTexts`` write what LibCST's
``code_for_node``/``.code`` write, on the fixtures before and after: a difference would change
every output file."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from tern.engine.results import ModuleTexts, code, module_code, short_code

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "fixtures" / "tf").rglob("*.py"))[::3] + sorted((ROOT / "fixtures" / "expected").rglob("*.py"))[::3]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_same_code_as_libcst(path):
    module = cst.parse_module(path.read_text(encoding="utf-8"))
    assert module_code(module) == module.code
    for stmt in module.body:
        assert code(stmt) == cst.Module([]).code_for_node(stmt)
        assert code(stmt, module) == module.code_for_node(stmt)
    texts = ModuleTexts()  # statements kept from one version to the next are generated once
    assert texts.code(module) == module.code
    shorter = module.with_changes(body=module.body[1:], has_trailing_newline=False)
    assert texts.code(shorter) == shorter.code
    changed = module.with_changes(body=[cst.parse_statement("import jax\n"), *module.body])
    assert texts.code(changed) == changed.code


@pytest.mark.parametrize("text", ["", "\n", "x", "# only a comment\n", "# no newline", "x = 1\n\n# footer\n",
                                  "\r\nx = 1\r\n", "def f():\n    return 1"])
def test_module_texts_edges(text):
    module = cst.parse_module(text)
    assert ModuleTexts().code(module) == module.code == text


def test_crlf_and_tabs_are_the_modules():
    module = cst.parse_module("if x:\r\n\ty = 1\r\n")
    assert module_code(module) == module.code == "if x:\r\n\ty = 1\r\n"


def _short_the_long_way(node: cst.CSTNode) -> str:
    text = " ".join(cst.Module([]).code_for_node(node).split())
    return text if len(text) <= 120 else text[:117] + "..."


@pytest.mark.parametrize("path", FILES[::2], ids=lambda p: str(p.relative_to(ROOT)))
def test_short_code_is_the_whole_code_cut(path):
    """An edit's text is generated only as far as the cut needs; it must read as if cut from all of it."""
    module = cst.parse_module(path.read_text(encoding="utf-8"))
    for stmt in module.body:
        for node in (stmt, *getattr(getattr(stmt, "body", None), "body", ())):
            assert short_code(node) == _short_the_long_way(node)


@pytest.mark.parametrize("text", [
    "x = 1\n",
    "f(" + ", ".join(f"a{i}" for i in range(60)) + ")\n",  # cut
    "s = '" + " " * 300 + "x'\n",  # whitespace inside a token: counted, then all of it generated
    "# " + "word " * 60 + "\ny = 2\n",
    "def f(a,\n      b):\n" + "    return a + b\n" * 40,
])
def test_short_code_edges(text):
    node = cst.parse_module(text).body[0]
    assert short_code(node) == _short_the_long_way(node)
