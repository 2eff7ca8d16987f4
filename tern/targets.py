"""Spell target symbols with their conventional aliases and schedule their imports.

Rules write targets as full dotted names (``jax.numpy.sum``); this module turns them into
``jnp.sum`` and records ``import jax.numpy as jnp``. Rules never edit import statements:
``finalize_imports`` adds what was scheduled and drops TF imports nothing uses any more.
"""

from __future__ import annotations

import libcst as cst

from tern.names import dotted_name, import_bindings
from tern.records import TargetModule


def attribute_chain(dotted: str) -> cst.BaseExpression:
    parts = dotted.split(".")
    node: cst.BaseExpression = cst.Name(parts[0])
    for part in parts[1:]:
        node = cst.Attribute(value=node, attr=cst.Name(part))
    return node


class ImportPlan:
    """Imports a file's generated code needs, as (module, alias) pairs."""

    def __init__(self, modules: tuple[TargetModule, ...]):
        self._modules = modules
        self.needed: dict[str, str] = {}

    def module_for(self, dotted: str) -> TargetModule | None:
        for module in self._modules:
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


class _Respell(cst.CSTTransformer):
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
    return node.visit(_Respell(plan))


def _import_statement(module: str, alias: str) -> cst.SimpleStatementLine:
    if alias == module:
        return cst.parse_statement(f"import {module}\n")
    last = module.rsplit(".", 1)
    if len(last) == 2 and last[1] == alias:
        return cst.parse_statement(f"from {last[0]} import {alias}\n")
    return cst.parse_statement(f"import {module} as {alias}\n")


class _NameUses(cst.CSTVisitor):
    """Names used at module level or not shadowed where they are used."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self._shadow: list[set[str]] = []

    def visit_FunctionDef(self, node) -> None:
        from tern.names import function_scope

        bound, _ = function_scope(node)
        self._shadow.append(bound)

    def leave_FunctionDef(self, node) -> None:
        self._shadow.pop()

    def visit_Lambda(self, node) -> None:
        from tern.names import function_scope

        bound, _ = function_scope(node)
        self._shadow.append(bound)

    def leave_Lambda(self, node) -> None:
        self._shadow.pop()

    def visit_Import(self, node):
        return False

    def visit_ImportFrom(self, node):
        return False

    def visit_Name(self, node: cst.Name) -> None:
        if not any(node.value in bound for bound in self._shadow):
            self.names.add(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)  # the member name is not a use of a local name
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False


def _is_source_import(stmt: cst.CSTNode) -> bool:
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


def finalize_imports(
    module: cst.Module, plan: ImportPlan, todo_comment
) -> tuple[cst.Module, list[str], list[str]]:
    """Add scheduled imports; drop unused TF/Keras imports; TODO the used ones.

    Returns the module, the imports added and the source imports removed.
    ``todo_comment(stmt, construct, reason)`` marks a TF import that must stay.
    """
    uses = _NameUses()
    module.visit(uses)
    body = list(module.body)
    removed: list[str] = []
    kept: list[cst.CSTNode] = []
    existing: dict[str, str] = {}
    for stmt in body:
        if _is_import(stmt):
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    for local, full in import_bindings(small).items():
                        existing[local] = full
        if _is_source_import(stmt):
            bound = {}
            for small in stmt.body:
                bound.update(import_bindings(small))
            if not (set(bound) & uses.names):
                removed.append(cst.Module([]).code_for_node(stmt).strip())
                continue
            still = sorted(set(bound) & uses.names)
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
        added.append(cst.Module([]).code_for_node(stmt).strip())
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
    return module.with_changes(body=kept), added, removed
