"""Spell target symbols with their conventional aliases and schedule their imports.

Rules write targets as full dotted names (``jax.numpy.sum``); this module turns them into
``jnp.sum`` and records ``import jax.numpy as jnp``. Rules never edit import statements:
``finalize_imports`` adds what was scheduled and drops TF imports nothing uses any more.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

import libcst as cst

from tern.engine.ast_walks import children as ast_children
from tern.engine.dispatch import CachedHooks
from tern.engine.names import ast_scope, dotted_name, import_bindings, may_name, parsed
from tern.engine.records import TargetModule
from tern.engine.results import code, module_code
from tern.engine.transform import transform


def attribute_chain(dotted: str) -> cst.BaseExpression:
    parts = dotted.split(".")
    node: cst.BaseExpression = cst.Name(parts[0])
    for part in parts[1:]:
        node = cst.Attribute(value=node, attr=cst.Name(part))
    return node


class ImportPlan:
    """Imports a file's generated code needs, as (module, alias) pairs."""

    def __init__(self, modules: tuple[TargetModule, ...]):
        self.modules = modules
        self.needed: dict[str, str] = {}

    def module_for(self, dotted: str) -> TargetModule | None:
        for module in self.modules:
            if dotted == module.name or dotted.startswith(module.name + "."):
                return module
        return None

    def spell(self, dotted: str) -> str:
        """``jax.numpy.sum`` -> ``jnp.sum``, scheduling the import."""
        module = self.module_for(dotted)
        if module is None:
            return dotted
        self.needed[module.name] = module.alias
        return module.alias + dotted[len(module.name) :]

    def spell_node(self, dotted: str) -> cst.BaseExpression:
        return attribute_chain(self.spell(dotted))


class _Respell(CachedHooks):
    """Respells full dotted target names inside a parsed template skeleton."""

    def __init__(self, plan: ImportPlan):
        self.plan = plan
        self._inner: set[int] = set()

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._inner.add(id(node.value))
        self._inner.add(id(node.attr))

    def leave_Attribute(self, original, updated):
        name = dotted_name(updated)
        if name is not None and self.plan.module_for(name) is not None:
            return self.plan.spell_node(name)
        return updated

    def leave_Name(self, original, updated):
        # bare module names (``jax`` alone) need their import too
        if id(original) not in self._inner and self.plan.module_for(updated.value) is not None:
            self.plan.spell(updated.value)
        return updated


def respell(node: cst.CSTNode, plan: ImportPlan) -> cst.CSTNode:
    return transform(node, _Respell(plan))


def _import_statement(module: str, alias: str) -> cst.SimpleStatementLine:
    if alias == module:
        return cst.parse_statement(f"import {module}\n")
    last = module.rsplit(".", 1)
    if len(last) == 2 and last[1] == alias:
        return cst.parse_statement(f"from {last[0]} import {alias}\n")
    return cst.parse_statement(f"import {module} as {alias}\n")


@functools.lru_cache(maxsize=4)  # the import steps ask twice of one text
def names_in_use(text: str) -> frozenset[str]:
    """Names read anywhere in source ``text`` where no enclosing function rebinds them.

    Uses Python's ``ast`` (C speed) on the generated text: a second LibCST walk of the whole
    file cost as much as the translation pass itself.
    """
    used: set[str] = set()
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    stack: list[tuple[ast.AST, frozenset[str]]] = [(parsed(text), frozenset())]  # a set: the order is free
    while stack:
        node, shadow = stack.pop()
        kind = node.__class__
        if kind is ast.Name:
            if node.ctx.__class__ is ast.Load and node.id not in shadow:
                used.add(node.id)
            continue  # its only child is its context
        if kind in functions:
            outside = [*node.args.defaults, *[d for d in node.args.kw_defaults if d is not None]]
            if kind is not ast.Lambda:
                args = node.args
                outside += node.decorator_list
                outside += [arg.annotation for arg in (*args.posonlyargs, *args.args, args.vararg, *args.kwonlyargs,
                                                       args.kwarg) if arg is not None and arg.annotation is not None]
                if node.returns is not None:
                    outside.append(node.returns)
            stack.extend((child, shadow) for child in outside)
            bound, imports = ast_scope(node)  # imports inside the function shadow too
            inner = shadow | bound | set(imports)
            stack.extend((child, inner) for child in (node.body if isinstance(node.body, list) else [node.body]))
            continue
        stack.extend((child, shadow) for child in ast_children(node))
    return frozenset(used)


def fallback_lines(stmt: cst.CSTNode) -> list[cst.CSTNode] | None:
    """The statements of a top-level ``try: import A / except ImportError: import B`` (an
    import with a fallback), or None for any other statement."""
    if not isinstance(stmt, cst.Try):
        return None
    blocks = [stmt.body, *(h.body for h in stmt.handlers), *(b.body for b in (stmt.orelse, stmt.finalbody) if b is not None)]
    lines = [line for block in blocks for line in block.body]
    return lines if lines and all(isinstance(line, cst.SimpleStatementLine) for line in lines) else None


def _bindings(stmt: cst.CSTNode) -> dict[str, str]:
    bound: dict[str, str] = {}
    for line in fallback_lines(stmt) or [stmt]:
        for small in getattr(line, "body", ()):
            if isinstance(small, (cst.Import, cst.ImportFrom)):
                bound.update(import_bindings(small))
    return bound


def _is_source_import(stmt: cst.CSTNode) -> bool:
    lines = fallback_lines(stmt)
    if lines is not None:  # a TF import with a TF fallback: one import
        return all(_is_source_import(line) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in line.body)
                   for line in lines)
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, (cst.Import, cst.ImportFrom)):
            bound = import_bindings(small)
            if bound and all(v.split(".")[0] in ("tensorflow", "keras", "tf_keras") for v in bound.values()):
                return True
    return False


def _is_import(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and any(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
    )


def _is_docstring_or_future(stmt: cst.CSTNode) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    if isinstance(small, cst.Expr) and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString)):
        return True
    return isinstance(small, cst.ImportFrom) and dotted_name(small.module or cst.Name("x")) == "__future__"


@dataclass(frozen=True)
class FinalImports:
    """A module with its imports settled, and what changed: the imports added, the source imports removed."""

    module: cst.Module
    added: list[str]
    removed: list[str]
    #: ``names_in_use`` of the module's code when it was read (None: not read). Settling imports
    #: adds and drops import statements only, which read no name: it holds for the result too.
    names_read: frozenset[str] | None = None


def finalize_imports(
    module: cst.Module, plan: ImportPlan, todo_comment, kept_comment=None, allowed: frozenset[str] = frozenset(),
    module_text=module_code,
) -> FinalImports:
    """Add scheduled imports; drop unused TF/Keras imports; TODO the used ones.

    ``todo_comment(stmt, construct, reason)`` marks a TF import that must stay;
    ``kept_comment(stmt)`` marks one whose every use is allowed TF (names in ``allowed``:
    tf.data), which is not residue. ``module_text``: how to read a module's code.
    """
    body = list(module.body)
    sources = [_is_source_import(stmt) for stmt in body]
    bound_by_source = set().union(*(_bindings(stmt) for stmt, source in zip(body, sources) if source))
    used: frozenset[str] = frozenset()
    names_read = None
    if bound_by_source:
        rest = module_text(module.with_changes(body=[stmt for stmt, source in zip(body, sources) if not source]))
        if may_name(rest, bound_by_source):  # else nothing can read them
            used = names_read = names_in_use(module_text(module))
    removed: list[str] = []
    kept: list[cst.CSTNode] = []
    existing: dict[str, str] = {}
    for stmt, source in zip(body, sources):
        if _is_import(stmt):
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    for local, full in import_bindings(small).items():
                        existing[local] = full
        if source:
            bound = _bindings(stmt)
            if not (set(bound) & used):
                removed.append(code(stmt).strip())
                continue
            still = sorted(set(bound) & used)
            if kept_comment is not None and set(still) <= allowed:
                kept.append(kept_comment(stmt))
                continue
            stmt = todo_comment(
                stmt,
                "import " + ", ".join(bound[s] for s in still),
                f"still used by untranslated code ({', '.join(still)}); see the TODOs below",
            )
        kept.append(stmt)
    added: list[str] = []
    new_imports = []
    for name, alias in sorted(plan.needed.items()):
        if existing.get(alias) == name or (alias == name and alias in existing):
            continue
        stmt = _import_statement(name, alias)
        new_imports.append(stmt)
        added.append(code(stmt).strip())
    if kept and removed and not new_imports and not module.header and kept[0].leading_lines:
        # the removed import was first: do not start the file with blank lines
        kept[0] = kept[0].with_changes(leading_lines=[l for l in kept[0].leading_lines if l.comment is not None])
    if new_imports:
        at = 0
        for i, stmt in enumerate(kept):
            if _is_docstring_or_future(stmt):
                at = i + 1
            elif _is_import(stmt):
                at = i + 1
            else:
                break
        kept[at:at] = new_imports
    return FinalImports(module.with_changes(body=kept), added, removed, names_read)
