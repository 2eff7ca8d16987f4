"""No silent residue: in every golden translation, each statement that still reads a
TensorFlow/Keras name carries a ``TODO(tern)`` (on its line or the comments right above),
unless it is TF kept on purpose (tf.data input pipelines under the import's "tern: kept"
comment). A TF call left without a TODO is a bug: it only shows when the code runs."""

import ast
from pathlib import Path

import pytest

EXPECTED = Path(__file__).resolve().parent.parent / "fixtures" / "expected"
ROOTS = ("tensorflow", "keras", "tf_keras")
KEPT = "tern: kept for tf.data"
FILES = sorted(p for p in EXPECTED.rglob("*.py") if p.name != "_keras_compat.py")


def _marked(lines: list[str], lineno: int, mark: str) -> bool:
    """``mark`` on the statement's first line or in the comment block right above it."""
    at = lineno - 1
    if mark in lines[at]:
        return True
    at -= 1
    while at >= 0 and lines[at].strip().startswith("#"):
        if mark in lines[at]:
            return True
        at -= 1
    return False


def _heads(node: ast.stmt) -> list[ast.AST]:
    """What a statement itself evaluates (a compound statement: its header only)."""
    if isinstance(node, (ast.If, ast.While)):
        return [node.test]
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return [node.iter]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [item.context_expr for item in node.items]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [*node.decorator_list, *node.args.defaults, *[d for d in node.args.kw_defaults if d is not None]]
    if isinstance(node, ast.ClassDef):
        return [*node.decorator_list, *node.bases, *node.keywords]
    if isinstance(node, (ast.Try, ast.Import, ast.ImportFrom)):
        return []
    return [node]


def silent_lines(text: str) -> list[str]:
    lines = text.splitlines()
    tree = ast.parse(text)
    bound: dict[str, bool] = {}  # TF/Keras name -> its import is kept on purpose
    tries = {id(s): s for s in ast.walk(tree) if isinstance(s, ast.Try)}
    inside_try = {id(n): t for t in tries.values() for n in ast.walk(t) if n is not t}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
            names = [(a.asname or a.name).split(".")[0] for a in node.names
                     if ((node.module + "." if isinstance(node, ast.ImportFrom) and node.module else "") + a.name).split(".")[0] in ROOTS]
            if not names:
                continue
            kept = _marked(lines, node.lineno, KEPT)
            bound.update(dict.fromkeys(names, kept))
            owner = inside_try.get(id(node))
            if not (kept or _marked(lines, node.lineno, "TODO(tern)") or (owner and _marked(lines, owner.lineno, "TODO(tern)"))):
                found.append(f"{node.lineno}: {lines[node.lineno - 1].strip()}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        for head in _heads(node):
            uses = [n for n in ast.walk(head) if isinstance(n, ast.Name) and n.id in bound]
            kept_uses = {id(a.value) for a in ast.walk(head) if isinstance(a, ast.Attribute) and a.attr == "data"
                         and isinstance(a.value, ast.Name) and bound.get(a.value.id)}
            start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])  # a decorator's line
            if any(id(n) not in kept_uses for n in uses) and not _marked(lines, start, "TODO(tern)"):
                found.append(f"{node.lineno}: {lines[node.lineno - 1].strip()}")
                break
    return found


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(EXPECTED)) for p in FILES])
def test_every_tf_leftover_has_a_todo(path):
    assert silent_lines(path.read_text()) == []


def test_the_check_finds_what_it_should():
    text = ("# TODO(tern): import tensorflow: still used\nimport tensorflow as tf\n"
            "# tern: kept for tf.data input pipelines\nimport tensorflow as tfd\n\n\n"
            "def f(x):\n    y = tf.shape(x)\n    # TODO(tern): tf.unique: no rule\n    z = tf.unique(x)\n"
            "    if tf.rank(x) > 1:\n        pass\n    return tfd.data.Dataset.range(3), tfd.constant(1)\n")
    assert silent_lines(text) == ["8: y = tf.shape(x)", "11: if tf.rank(x) > 1:", "13: return tfd.data.Dataset.range(3), tfd.constant(1)"]
