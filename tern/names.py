"""Fast name resolution: every spelling of a TF/Keras symbol reaches one canonical name.

LibCST's QualifiedNameProvider builds full scope analysis and costs ~10x a parse. We need
much less: the module's import aliases, plus which names a function rebinds locally
(shadowing), so resolution is a dict lookup per dotted expression.
"""

from __future__ import annotations

import libcst as cst

SOURCE_ROOTS = ("tensorflow", "keras", "tf_keras")


def dotted_name(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def _module_name(node: cst.BaseExpression) -> str:
    return dotted_name(node) or ""


def import_bindings(node: cst.Import | cst.ImportFrom) -> dict[str, str]:
    """Local name -> full dotted path bound by one import statement."""
    out: dict[str, str] = {}
    if isinstance(node, cst.Import):
        for alias in node.names:
            full = _module_name(alias.name)
            if alias.asname is not None:
                out[alias.asname.name.value] = full
            else:
                head = full.split(".")[0]
                out[head] = head
        return out
    if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
        return out
    module = _module_name(node.module)
    for alias in node.names:
        name = _module_name(alias.name)
        local = alias.asname.name.value if alias.asname is not None else name
        out[local] = f"{module}.{name}"
    return out


class Canonicalizer:
    """Maps a full dotted source path to its canonical spelling (tables' prefixes)."""

    def __init__(self, prefixes: tuple[tuple[str, str], ...]):
        self._prefixes = prefixes
        self._cache: dict[str, str] = {}

    def __call__(self, full: str) -> str:
        hit = self._cache.get(full)
        if hit is not None:
            return hit
        out = full
        for prefix, canonical in self._prefixes:
            if out == prefix or out.startswith(prefix + "."):
                out = canonical + out[len(prefix) :]
                break
        self._cache[full] = out
        return out


class _BoundNames(cst.CSTVisitor):
    """Names a function body binds, not descending into nested scopes."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.imports: dict[str, str] = {}

    def _targets(self, node: cst.BaseExpression) -> None:
        if isinstance(node, cst.Name):
            self.names.add(node.value)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for el in node.elements:
                self._targets(el.value)
        elif isinstance(node, cst.StarredElement):
            self._targets(node.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._targets(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._targets(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._targets(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._targets(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._targets(node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._targets(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        if isinstance(node.name, cst.Name):
            self._targets(node.name)

    def visit_Import(self, node: cst.Import) -> bool:
        self.imports.update(import_bindings(node))
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        self.imports.update(import_bindings(node))
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.names.add(node.name.value)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.names.add(node.name.value)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


def function_scope(node: cst.FunctionDef | cst.Lambda) -> tuple[set[str], dict[str, str]]:
    """(names the function binds, imports it makes) for shadowing checks."""
    visitor = _BoundNames()
    params = node.params
    for param in (*params.posonly_params, *params.params, *params.kwonly_params):
        visitor.names.add(param.name.value)
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            visitor.names.add(star.name.value)
    if isinstance(node, cst.FunctionDef):
        node.body.visit(visitor)
    visitor.names.difference_update(visitor.imports)
    return visitor.names, visitor.imports


def source_import_names(source: str) -> frozenset[str]:
    """Every local name any import in the file binds to a TF/Keras path (cheap ``ast`` scan).

    Names outside this set can never resolve, so most lookups end before any scope work.
    """
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return frozenset()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in SOURCE_ROOTS:
                    out.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.split(".")[0] in SOURCE_ROOTS:
                out.update(alias.asname or alias.name for alias in node.names)
    return frozenset(out)


class Scopes:
    """A stack of scopes; resolves the head of a dotted name through it.

    A function's bound names are computed lazily, the first time a name that could be a
    TF import is looked up inside it: most functions never need it.
    """

    def __init__(self, module_imports: dict[str, str], canonical: Canonicalizer, candidates: frozenset[str] | None = None):
        self._stack: list[list] = [[set(), module_imports, None]]
        self._canonical = canonical
        self._candidates = candidates

    def push_function(self, node: cst.FunctionDef | cst.Lambda) -> None:
        self._stack.append([None, None, node])

    def pop(self) -> None:
        self._stack.pop()

    def lookup(self, head: str) -> str | None:
        if self._candidates is not None and head not in self._candidates:
            return None
        for frame in reversed(self._stack):
            if frame[0] is None:
                frame[0], frame[1] = function_scope(frame[2])
            bound, imports = frame[0], frame[1]
            if head in imports:
                return imports[head]
            if head in bound:
                return None
        return None

    def resolve(self, node: cst.BaseExpression) -> str | None:
        """Canonical name of a Name/Attribute that reaches a TF/Keras import, else None."""
        name = dotted_name(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        if self._candidates is not None and head not in self._candidates:
            return None
        full = self.lookup(head)
        if full is None or full.split(".", 1)[0] not in SOURCE_ROOTS:
            return None
        return self._canonical(f"{full}.{rest}" if rest else full)
