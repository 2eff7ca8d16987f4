"""Residual units: the functions, methods and classes the LLM is asked about, and which
tests and replayed calls reach them.

A unit is a top-level ``def`` or ``class`` of a translated file, or a method of a
top-level class (a failing test method); never a whole file. The index is static: a
unit is reached by a test or a replayed call when the test's body, or the replayed
factory or class, names it directly or through other definitions of the package
(``from pkg.ops import f`` counts; attribute access on unknown objects does not).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from tern.engine.report import TODO_MARK
from tern.engine.support_module import is_generated
from tern.verify.record import is_test_file


@dataclass(frozen=True, order=True)
class Unit:
    file: str  # relative to the package root: "ops.py", "sub/model_test.py"
    name: str  # "positive_values", "SalientTokenSelector", "BlocksTest.test_shapes"
    kind: str  # function | class | method

    @property
    def key(self) -> str:
        return f"{self.file}::{self.name}"


@dataclass
class Definition:
    unit: Unit
    start: int  # first line, decorators included
    end: int
    refs: set[str] = field(default_factory=set)  # names it uses


@dataclass
class FileIndex:
    rel: str
    module: str
    defs: dict[str, Definition] = field(default_factory=dict)
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)  # local name -> (module, name) of the package
    todos: list[tuple[int, str]] = field(default_factory=list)  # (line, text)
    lines: list[str] = field(default_factory=list)

    def at(self, line: int) -> Definition | None:
        """The innermost definition holding ``line`` (a method before its class)."""
        found = [d for d in self.defs.values() if d.start <= line <= d.end]
        return min(found, key=lambda d: d.end - d.start) if found else None

    def top_at(self, line: int) -> Definition | None:
        found = [d for d in self.defs.values() if d.unit.kind != "method" and d.start <= line <= d.end]
        return found[0] if found else None


def _refs(node: ast.AST) -> set[str]:
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            names.add(sub.attr)
    return names


def _start(node: ast.AST) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


def index_file(root: Path, path: Path, package: str) -> FileIndex | None:
    rel = str(path.relative_to(root))
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    module = ".".join([package, *Path(rel).with_suffix("").parts])
    module = module.removesuffix(".__init__")
    index = FileIndex(rel, module, lines=text.splitlines())
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            kind = "class" if isinstance(node, ast.ClassDef) else "function"
            index.defs[node.name] = Definition(Unit(rel, node.name, kind), _start(node), node.end_lineno or node.lineno, _refs(node))
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        name = f"{node.name}.{item.name}"
                        index.defs[name] = Definition(Unit(rel, name, "method"), _start(item), item.end_lineno or item.lineno, _refs(item))
        elif isinstance(node, ast.ImportFrom) and node.module and (node.level or node.module.split(".")[0] == package):
            base = node.module if not node.level else ".".join([*module.split(".")[: -node.level], node.module])
            for alias in node.names:
                index.imported[alias.asname or alias.name] = (base, alias.name)
    for number, line in enumerate(index.lines, start=1):
        if TODO_MARK in line and line.lstrip().startswith("#"):
            index.todos.append((number, line.split(TODO_MARK, 1)[1].lstrip(": ").strip()))
    return index


class PackageIndex:
    def __init__(self, root: Path, package: str):
        self.root = root
        self.package = package
        self.files: dict[str, FileIndex] = {}
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts or is_generated(path):  # tern's support copy is no unit to fix
                continue
            found = index_file(root, path, package)
            if found is not None:
                self.files[found.rel] = found
        self.by_module = {f.module: f for f in self.files.values()}

    def definition(self, unit: Unit) -> Definition | None:
        found = self.files.get(unit.file)
        return found.defs.get(unit.name) if found else None

    def todo_units(self) -> tuple[dict[Unit, list[str]], list[str]]:
        """Units holding a TODO (or announced by a TODO comment right above them), and
        the TODOs that belong to no unit (module-level statements), as ``file:line: text``.
        The TODO on a TensorFlow import that untranslated code still uses is neither: it
        goes away with the units."""
        units: dict[Unit, list[str]] = {}
        loose: list[str] = []
        for f in self.files.values():
            in_tests = is_test_file(self.root / f.rel)
            for line, text in f.todos:
                # a test method is a unit of its own; elsewhere a class is rewritten whole
                owner = (f.at(line) if in_tests else f.top_at(line)) or self._announced(f, line)
                if owner is not None:
                    units.setdefault(owner.unit, []).append(text)
                elif not text.startswith("import "):
                    loose.append(f"{f.rel}:{line}: {text}")
        return units, loose

    @staticmethod
    def _announced(f: FileIndex, line: int) -> Definition | None:
        """The definition below a block of comments that starts at ``line``."""
        for number in range(line + 1, len(f.lines) + 1):
            stripped = f.lines[number - 1].strip()
            if stripped.startswith("#") or not stripped:
                continue
            owner = f.top_at(number)
            return owner if owner is not None and owner.start == number else None
        return None

    def unit_for_target(self, target: str) -> Unit | None:
        """``pkg.mod:Name`` of a replayed case to its unit."""
        module, _, name = target.partition(":")
        found = self.by_module.get(module)
        definition = found.defs.get(name) if found else None
        return definition.unit if definition else None

    def reached(self, file: str, name: str) -> set[Unit]:
        """Units that definition ``name`` of ``file`` uses, directly or through others."""
        seen: set[Unit] = set()
        todo = [(file, name)]
        while todo:
            rel, current = todo.pop()
            f = self.files.get(rel)
            definition = f.defs.get(current) if f else None
            if f is None or definition is None or definition.unit in seen:
                continue
            seen.add(definition.unit)
            scope = [definition]
            if definition.unit.kind == "method":  # a test method runs its class's setUp too
                owner = current.split(".")[0]
                scope += [d for n, d in f.defs.items() if n.startswith(owner + ".set")]
                seen.add(f.defs[owner].unit)
            for d in scope:
                for ref in d.refs:
                    if ref in f.defs and f.defs[ref].unit.kind != "method":
                        todo.append((rel, ref))
                    elif ref in f.imported:
                        module, imported = f.imported[ref]
                        target = self.by_module.get(module)
                        if target is not None:
                            todo.append((target.rel, imported))
        return seen

    def test_definition(self, test_id: str, classname: str = "") -> Definition | None:
        """The test behind a junit id (``path/test_x.py::test_name[param]`` or a method of
        ``classname``); parameterized names are matched by their longest defined prefix."""
        path, _, name = test_id.partition("::")
        rel = self._rel(path)
        f = self.files.get(rel) if rel else None
        if f is None:
            return None
        owner = classname.rsplit(".", 1)[-1] if classname and not classname.endswith(Path(rel).stem) else ""
        name = name.split("[")[0]
        candidates = [d for n, d in f.defs.items()
                      if (n.startswith(owner + ".") if owner else "." not in n) and name.startswith(n.rsplit(".", 1)[-1])]
        return max(candidates, key=lambda d: len(d.unit.name)) if candidates else None

    def _rel(self, path: str) -> str | None:
        parts = Path(path).parts
        if parts and parts[0] == self.package:
            parts = parts[1:]
        rel = str(Path(*parts)) if parts else ""
        if rel in self.files:
            return rel
        dotted = path.replace(".", "/") + ".py"  # a classname-style id
        for candidate in self.files:
            if dotted.endswith(candidate):
                return candidate
        return None

    def test_units(self) -> list[Unit]:
        return [d.unit for f in self.files.values() if is_test_file(self.root / f.rel) for d in f.defs.values()]

    def source(self, unit: Unit) -> str:
        definition = self.definition(unit)
        if definition is None:
            return ""
        return "\n".join(self.files[unit.file].lines[definition.start - 1: definition.end])
