"""Which of a package's source files had a function of theirs called while a block ran.

The translated tests' job reports the package modules its tests reached (``ran``), so a
module reached only through others (an abstract base, a helper) counts as checked by them.
A ``sys.settrace`` call hook answered that at a cost of one Python-level check on every call
of every library, which more than doubled the job (1.4 s to 3.3 s on a transformer
fixture). Instead, while the block runs, the package's modules are imported through a
loader that puts ``__tern_ran__.add(file)`` at the top of every function body (``def``
and ``async def``, methods and nested functions; not lambdas, comprehensions, or module
and class bodies: importing a module runs those, and an import reaches nothing). Line
numbers are kept, so tracebacks read as the source; the instrumented code is never
written to ``__pycache__`` nor read from it (a worker keeps it in memory, by its source
text: ``compiled.py``). Test files are left to pytest's own
assertion rewriting: they are not counted anyway.

The sandbox worker forgets the package's modules after every job, so each job imports
them again, through this loader.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.abc
import importlib.machinery
import os
import sys
from pathlib import Path
from typing import Iterator

from tern.verify.compiled import compiled
from tern.verify.record import is_test_file

MARK = "__tern_ran__"


class _Marking(ast.NodeTransformer):
    def __init__(self, path: str):
        self.path = path

    def _mark(self, node: ast.AST) -> ast.AST:
        self.generic_visit(node)
        body = node.body
        at = 1 if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str) else 0  # after the docstring: it stays the docstring
        first = body[min(at, len(body) - 1)]
        call = ast.Expr(ast.Call(ast.Attribute(ast.Name(MARK, ast.Load()), "add", ast.Load()), [ast.Constant(self.path)], []))
        body.insert(at, ast.copy_location(call, first))
        return node

    visit_FunctionDef = _mark
    visit_AsyncFunctionDef = _mark


class _MarkingLoader(importlib.machinery.SourceFileLoader):
    def __init__(self, fullname: str, path: str, ran: set[Path]):
        super().__init__(fullname, path)
        self.ran = ran

    def get_code(self, fullname: str):
        """From the source: no bytecode cache read or written; compiled once per text in
        this process (``compiled.py``)."""
        source = self.get_data(self.path)

        def make():
            tree = ast.parse(source, filename=self.path)
            tree = ast.fix_missing_locations(_Marking(self.path).visit(tree))
            return compile(tree, self.path, "exec", dont_inherit=True)

        return compiled("marked", self.path, source, make)

    def exec_module(self, module) -> None:
        module.__dict__[MARK] = _Recorder(self.ran)
        super().exec_module(module)


class _Recorder:
    """``add(file)``: the shared set, with files as ``Path`` objects."""

    def __init__(self, ran: set[Path]):
        self.ran = ran

    def add(self, path: str) -> None:
        self.ran.add(Path(path))


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, prefix: str, ran: set[Path]):
        self.prefix, self.ran = prefix, ran

    def find_spec(self, fullname, path, target=None):
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        origin = getattr(spec, "origin", None)
        if (spec is None or not isinstance(origin, str) or not origin.endswith(".py")
                or not origin.startswith(self.prefix) or is_test_file(Path(origin))):
            return None
        spec.loader = _MarkingLoader(fullname, origin, self.ran)
        return spec


@contextlib.contextmanager
def files_run(root: Path) -> Iterator[set[Path]]:
    """The source files under ``root`` whose functions were called while the block ran
    (modules imported inside the block)."""
    ran: set[Path] = set()
    finder = _Finder(os.path.abspath(root) + os.sep, ran)
    sys.meta_path.insert(0, finder)
    try:
        yield ran
    finally:
        sys.meta_path.remove(finder)
