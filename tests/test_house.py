"""The house's structure as checked facts (issue 18, docs/architecture.md): the layers
import-linter's contracts in pyproject.toml describe, no import cycle, no private name
imported across modules, and ruff clean. A failure names the import that broke it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]


def test_layers_hold():
    """Engine below features below rules below verify/sandbox below the commands (pyproject.toml)."""
    run = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    proc = subprocess.run([sys.executable, "-c", run, "--config", str(ROOT / "pyproject.toml")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and "0 broken" in proc.stdout, proc.stdout[-4000:] + proc.stderr[-2000:]


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in sorted(graph.modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_import_cycles():
    """Function-level imports count (grimp sees them); imports only for type checking do not."""
    graph = grimp.build_graph("tern", "tern_rules", include_external_packages=False, exclude_type_checking_imports=True)
    assert _cycles(graph) == []


def test_cycle_finder_finds_a_planted_cycle():
    class Planted:
        modules = {"a", "b", "c", "d"}
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, module):
            return self.edges[module]

    assert _cycles(Planted()) == [["a", "b", "c"]]


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        ours = node.level > 0 or (node.module or "").split(".")[0] in ("tern", "tern_rules")
        for alias in node.names if ours else ():
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {'.' * node.level}{node.module} import {alias.name}")
    return found


def test_no_private_names_imported_across_modules():
    """``from tern.x import _y`` couples two modules through a name one of them calls its own.
    rules/support is exempt: its files are the support module's parts, joined into one module."""
    files = [p for d in ("tern", "rules", "eval", "tests") for p in sorted((ROOT / d).rglob("*.py"))
             if not (d == "rules" and p.relative_to(ROOT / d).parts[0] == "support") and "training_data" not in p.parts]
    assert [hit for path in files for hit in _private_imports(path)] == []


def test_private_import_check_sees_one(tmp_path, monkeypatch):
    planted = ROOT / "tern" / "engine" / "__init__.py"
    text = "from tern.engine.names import _hidden\nfrom .names import _other\nfrom tern.engine.names import public\n"
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None: text)
    assert [h.split(": ", 1)[1] for h in _private_imports(planted)] == [
        "tern.engine.names import _hidden", ".names import _other"]


def test_ruff_clean():
    """Pyflakes' checks and the private-import rule (pyproject.toml [tool.ruff.lint])."""
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "tern", "rules", "tests", "eval"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def _imported_names(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in ("tern", "tern_rules"):
            for alias in node.names:
                yield node.lineno, node.module, alias.name


def test_every_import_of_our_own_names_resolves():
    """Each ``from tern... import name`` (function-level ones too) names something that exists
    where it says, and not only through another module's import of it: a moved name
    fails here, not in the one run that reaches a function-level import."""
    import importlib

    missing, borrowed = [], []
    files = [p for d in ("tern", "rules", "eval", "tests") for p in sorted((ROOT / d).rglob("*.py"))
             if not (d == "rules" and p.relative_to(ROOT / d).parts[0] == "support") and "training_data" not in p.parts]
    for path in files:
        for line, module_name, name in _imported_names(path):
            try:
                module = importlib.import_module(module_name)
            except ImportError as exc:
                missing.append(f"{path.relative_to(ROOT)}:{line}: {module_name}: {exc}")
                continue
            if hasattr(module, name):
                source = getattr(module, name)
                home = getattr(source, "__module__", None)
                if (home or "").split(".")[0] in ("tern", "tern_rules") and home != module_name \
                        and not isinstance(source, type(importlib)) and name not in getattr(module, "__all__", ()):
                    borrowed.append(f"{path.relative_to(ROOT)}:{line}: {module_name}.{name} is {home}'s")
                continue
            try:
                importlib.import_module(f"{module_name}.{name}")
            except ImportError:
                missing.append(f"{path.relative_to(ROOT)}:{line}: {module_name} has no {name}")
    assert missing == []
    assert borrowed == []
