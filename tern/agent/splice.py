"""Put an accepted (or candidate) definition into its module with LibCST.

The unit's statement is replaced where it stands; comments above it are kept except the
``TODO(tern)`` lines the new code answers. The answer's imports go after the module's
imports unless the module already binds the same name to the same thing (a different
binding of the same name is refused: it would change what other code sees). TensorFlow
and Keras imports that nothing uses any more are removed with their TODO comment.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from tern.agent.units import Unit
from tern.engine.names import import_bindings
from tern.engine.report import TODO_MARK
from tern.engine.targets import names_in_use


@dataclass(frozen=True)
class SpliceError:
    reason: str


def splice(source: str, unit: Unit, code: str, imports: tuple[str, ...] = (), note: str = "") -> str | SpliceError:
    """``source`` with ``unit`` replaced by ``code``; ``note`` (a comment line, e.g. a TODO
    for an unverified attempt) goes right above it."""
    try:
        module = cst.parse_module(source)
        new = cst.parse_module(code if code.endswith("\n") else code + "\n").body
    except cst.ParserSyntaxError as exc:
        return SpliceError(f"does not parse: {exc}")
    if len(new) != 1:
        return SpliceError("the replacement is not one definition")
    replacement = new[0]
    owner, _, method = unit.name.partition(".")
    body = list(module.body)
    for i, stmt in enumerate(body):
        if not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) or stmt.name.value != owner:
            continue
        if not method:
            body[i] = _keep_comments(stmt, replacement, note)
            break
        inner = list(stmt.body.body)
        for j, item in enumerate(inner):
            if isinstance(item, cst.FunctionDef) and item.name.value == method:
                inner[j] = _keep_comments(item, replacement, note)
                body[i] = stmt.with_changes(body=stmt.body.with_changes(body=inner))
                break
        else:
            return SpliceError(f"no method {unit.name} in {unit.file}")
        break
    else:
        return SpliceError(f"no definition {unit.name} in {unit.file}")
    module = module.with_changes(body=body)
    added = _imports(module, imports)
    if isinstance(added, SpliceError):
        return added
    return _drop_dead_source_imports(added).code


def _keep_comments(old: cst.CSTNode, new: cst.CSTNode, note: str) -> cst.CSTNode:
    leading = [line for line in old.leading_lines if not (line.comment and TODO_MARK in line.comment.value)]
    if note:
        leading.append(cst.EmptyLine(comment=cst.Comment("# " + " ".join(note.split()))))
    return new.with_changes(leading_lines=leading)


def _bindings(module: cst.Module) -> dict[str, str]:
    bound: dict[str, str] = {}
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    bound.update(import_bindings(small))
    return bound


def _imports(module: cst.Module, imports: tuple[str, ...]) -> cst.Module | SpliceError:
    if not imports:
        return module
    bound = _bindings(module)
    defined = {s.name.value for s in module.body if isinstance(s, (cst.FunctionDef, cst.ClassDef))}
    wanted = []
    for text in imports:
        try:
            stmts = cst.parse_module(text.strip() + "\n").body
        except cst.ParserSyntaxError as exc:
            return SpliceError(f"import does not parse: {exc}")
        for stmt in stmts:
            new: dict[str, str] = {}
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    new.update(import_bindings(small))
            if not new:  # relative or star: added unless written the same already
                text = cst.Module([]).code_for_node(stmt).strip()
                if all(cst.Module([]).code_for_node(s).strip() != text for s in module.body):
                    wanted.append(stmt)
                continue
            clash = [n for n, full in new.items() if (n in bound and bound[n] != full) or n in defined]
            if clash:
                return SpliceError(f"import of {', '.join(clash)} would rebind a name the module already uses")
            if all(bound.get(n) == full for n, full in new.items()):
                continue
            bound.update(new)
            wanted.append(stmt)
    if not wanted:
        return module
    body = list(module.body)
    at = 0
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
            at = i + 1
        elif i == 0 and isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Expr):
            at = 1  # the docstring
    body[at:at] = wanted
    return module.with_changes(body=body)


def _drop_dead_source_imports(module: cst.Module) -> cst.Module:
    used = names_in_use(module.code)
    body = []
    blank: list[cst.EmptyLine] = []  # the blank lines above a dropped import stay in place
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            bound: dict[str, str] = {}
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    bound.update(import_bindings(small))
            source = bound and all(v.split(".")[0] in ("tensorflow", "keras", "tf_keras") for v in bound.values())
            if source and not set(bound) & used:
                blank = blank or [line for line in stmt.leading_lines if line.comment is None][:1]
                continue
        if blank and not any(line.comment is None for line in stmt.leading_lines):
            stmt = stmt.with_changes(leading_lines=[*blank, *stmt.leading_lines])
        blank = []
        body.append(stmt)
    if body and body[0] is not module.body[0] and not module.header:
        body[0] = body[0].with_changes(leading_lines=[])
    return module.with_changes(body=body)
