"""Facts read from a translated tree without running it: TensorFlow left, TODOs, which
modules hold code.

"TensorFlow left" is any import of ``tensorflow``, ``keras`` or ``tf_keras``, except
TensorFlow used only for ``tf.data`` input pipelines: a fine data loader for JAX, which
the migration keeps on purpose (``import tensorflow as tf`` whose every use is
``tf.data...``, or ``from tensorflow.data import ...``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tern.report import TODO_MARK
from tern.verify.record import is_test_file

TF_ROOTS = ("tensorflow", "keras", "tf_keras")


def _python_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_bytes())
    except (SyntaxError, ValueError):
        return None


def _is_tf(module: str) -> bool:
    return module.split(".")[0] in TF_ROOTS


def _data_only(module: str) -> bool:
    return module == "tensorflow.data" or module.startswith("tensorflow.data.")


def tf_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, statement) of each TensorFlow/Keras import that is not for tf.data alone."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module and _is_tf(node.module):
            names = [a.name for a in node.names]
            if _data_only(node.module) or (node.module == "tensorflow" and names == ["data"]):
                continue
            found.append((node.lineno, f"from {node.module} import {', '.join(names)}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if not _is_tf(alias.name) or _data_only(alias.name):
                    continue
                bound = alias.asname or alias.name.split(".")[0]
                uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == bound]
                data_only = alias.name == "tensorflow" and uses and all(
                    isinstance(parents.get(n), ast.Attribute) and parents[n].attr == "data" for n in uses)
                if not data_only:
                    found.append((node.lineno, f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")))
    return found


def tensorflow_left(root: Path) -> list[str]:
    """``file:line: statement`` for each TF import left in the tree (tests included: a
    translated test that needs TensorFlow cannot run where the translation runs)."""
    lines = []
    for path in _python_files(root):
        tree = _parse(path)
        for line, statement in tf_imports(tree) if tree else ():
            lines.append(f"{path.relative_to(root).as_posix()}:{line}: {statement}")
    return lines


def todo_count(root: Path) -> int:
    """``TODO(tern)`` markers in the tree (a ready-made translation has no migrate report)."""
    return sum(p.read_text(encoding="utf-8", errors="replace").count(TODO_MARK) for p in _python_files(root))


def code_modules(root: Path, package: str) -> set[str]:
    """Dotted names of the non-test modules that define a function or a class: the ones
    that owe the verification something. A package ``__init__`` that only re-exports
    owes nothing."""
    found = set()
    for path in _python_files(root):
        if is_test_file(path):
            continue
        tree = _parse(path)
        if tree is None or not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in tree.body):
            continue
        rel = path.relative_to(root).with_suffix("").parts
        found.add(".".join([package, *(rel[:-1] if rel[-1] == "__init__" else rel)]))
    return found
