"""Facts read from a translated tree without running it: TensorFlow left, TODOs, which
modules hold code.

"TensorFlow left" is any import of ``tensorflow``, ``keras`` or ``tf_keras``, except
TensorFlow used only for ``tf.data`` input pipelines: a fine data loader for JAX, which
the migration keeps on purpose (an import whose every use is allowed TF use, as
``tern/features/tf_data/kept.py`` reads it against ``rules/allowed/``: tf.data outside jitted code, TF ops
in the functions tf.data runs in its graph).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tern.features.tf_data.kept import read_tree
from tern.engine.report import TODO_MARK
from tern.engine.support_module import is_generated
from tern.verify.record import is_test_file


def _python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):
        return None


def tensorflow_left(root: Path) -> list[str]:
    """``file:line: statement`` for each TF import left in the tree (tests included: a
    translated test that needs TensorFlow cannot run where the translation runs)."""
    lines = []
    for path, kept in read_tree(root).items():
        for entry in kept.imports:
            if not entry.allowed_only:
                lines.append(f"{path.relative_to(root).as_posix()}:{entry.line}: {entry.statement}")
    return lines


def todo_count(root: Path) -> int:
    """``TODO(tern)`` markers in the tree (a ready-made translation has no migrate report)."""
    return sum(p.read_text(encoding="utf-8", errors="replace").count(TODO_MARK) for p in _python_files(root))


def _has_behaviour(node: ast.stmt) -> bool:
    """A function, or a class with a method: marker classes and field-only records
    (``class FloatTensor(Tensor): pass``, a dataclass of fields) have nothing to compare."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return True
    return isinstance(node, ast.ClassDef) and any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in node.body)


def code_modules(root: Path, package: str) -> set[str]:
    """Dotted names of the non-test modules that define a function or a class with a method:
    the ones that owe the verification something. A package ``__init__`` that only
    re-exports, or a module of type markers, owes nothing."""
    found = set()
    for path in _python_files(root):
        if is_test_file(path) or is_generated(path):  # tern's support copy owes nothing
            continue
        tree = _parse(path)
        if tree is None or not any(_has_behaviour(n) for n in tree.body):
            continue
        rel = path.relative_to(root).with_suffix("").parts
        found.add(".".join([package, *(rel[:-1] if rel[-1] == "__init__" else rel)]))
    return found
