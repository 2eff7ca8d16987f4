"""Fast name resolution: every spelling of a TF/Keras symbol reaches one canonical name.

LibCST's QualifiedNameProvider builds full scope analysis and costs ~10x a parse. We need
much less: the module's import aliases, plus which names a function rebinds locally
(shadowing), so resolution is a dict lookup per dotted expression.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

import libcst as cst

from tern.engine.ast_walks import children as ast_children
from tern.engine.walk import walk

SOURCE_ROOTS = ("tensorflow", "keras", "tf_keras")


def dotted_name(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts = []
    while node.__class__ is cst.Attribute:  # LibCST's concrete classes (an ABC's isinstance that fails is slow)
        parts.append(node.attr.value)
        node = node.value
    if node.__class__ is not cst.Name:
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def short_name(name: str) -> str:
    """``tensorflow.data.Dataset`` -> ``tf.data.Dataset``: canonical names as users write them."""
    for prefix, short in (("tensorflow.", "tf."), ("keras.", "keras.")):
        if name.startswith(prefix):
            return short + name[len(prefix):]
    return name


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
        walk(node.body, visitor)
    visitor.names.difference_update(visitor.imports)
    return visitor.names, visitor.imports


@dataclass
class SourceFacts:
    """What one ``ast`` pass over the file tells name resolution (C speed, before LibCST work).

    ``candidates``: every local name an import anywhere binds to a TF/Keras path; other
    names can never resolve, so most lookups end at once. ``scopes``: each function's and
    lambda's bound names, queued by signature in source order, so the translator need not
    walk function bodies again.
    """

    candidates: frozenset[str]
    scopes: dict[tuple, list[tuple[set[str], dict[str, str]]]]

    def take_scope(self, node: cst.FunctionDef | cst.Lambda):
        queue = self.scopes.get(_cst_signature(node))
        return queue.pop(0) if queue else None


def ast_tail(node: ast.expr) -> str:
    """The last part of a name or attribute on Python's ``ast`` (``tf.keras.Model`` -> ``Model``); "" otherwise."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def ast_bindings(node) -> dict[str, str]:
    out = {}
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                out[alias.asname] = alias.name
            else:
                head = alias.name.split(".")[0]
                out[head] = head
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        for alias in node.names:
            out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return out


def _ast_signature(node) -> tuple:
    args = node.args
    names = tuple(a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs))
    return ("lambda" if isinstance(node, ast.Lambda) else node.name, names)


def _cst_signature(node: cst.FunctionDef | cst.Lambda) -> tuple:
    params = node.params
    names = tuple(p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params))
    return ("lambda" if isinstance(node, cst.Lambda) else node.name.value, names)


def ast_scope(fn) -> tuple[set[str], dict[str, str]]:
    """Same answer as ``function_scope`` for the matching LibCST node."""
    args = fn.args
    bound = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    bound |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    imports: dict[str, str] = {}
    stack = list(fn.body) if isinstance(fn.body, list) else []  # a lambda: its parameters, as function_scope
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.update(ast_bindings(node))
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        stack.extend(ast_children(node))
    bound.difference_update(imports)
    return bound, imports


def may_name(text: str, names) -> bool:
    """Whether code in ``text`` may spell one of ``names``: written in it, or the text is not
    ASCII (Python folds other identifiers to NFKC, which may spell a name differently). A test
    before parsing or walking for those names."""
    return not text.isascii() or any(name in text for name in names)


@functools.lru_cache(maxsize=4)
def parsed(text: str) -> ast.Module:
    """``ast.parse(text)`` once per text: a file's source is read by its name facts and its
    features' facts, and the finished text by the import steps, which often see it unchanged.
    Callers read the tree and never change it."""
    return ast.parse(text)


def source_facts(source: str) -> SourceFacts | None:
    try:
        tree = parsed(source)
    except (SyntaxError, ValueError):
        return None
    candidates: set[str] = set()
    scopes: dict[tuple, list] = {}
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    stack: list[ast.AST] = [tree]
    while stack:  # pre-order, in LibCST's order for the nodes that matter
        node = stack.pop()
        kind = node.__class__
        if kind in functions:
            scopes.setdefault(_ast_signature(node), []).append(ast_scope(node))
            children = [*getattr(node, "decorator_list", []), *node.args.defaults,
                        *[d for d in node.args.kw_defaults if d is not None]]
            children += node.body if isinstance(node.body, list) else [node.body]
        elif kind is ast.ClassDef:
            children = [*node.decorator_list, *node.bases, *node.keywords, *node.body]
        else:
            if kind is ast.Import or kind is ast.ImportFrom:  # statements: never below what is skipped above
                for local, full in ast_bindings(node).items():
                    if full.split(".")[0] in SOURCE_ROOTS:
                        candidates.add(local)
            children = ast_children(node)
        children.reverse()
        stack.extend(children)
    return SourceFacts(frozenset(candidates), scopes)


class Scopes:
    """A stack of scopes; resolves the head of a dotted name through it.

    A function's bound names are computed lazily, the first time a name that could be a
    TF import is looked up inside it: most functions never need it.
    """

    def __init__(self, module_imports: dict[str, str], canonical: Canonicalizer, facts: SourceFacts | None = None):
        self._stack: list[list] = [[set(), module_imports, None]]
        self._canonical = canonical
        self._facts = facts
        self._candidates = facts.candidates if facts is not None else None

    @property
    def imports_source(self) -> bool:
        """Whether the file imports TensorFlow or Keras at all (unknown: assume it does)."""
        return self._candidates is None or bool(self._candidates)

    def push_function(self, node: cst.FunctionDef | cst.Lambda) -> None:
        known = self._facts.take_scope(node) if self._facts is not None else None
        self._stack.append([known[0], known[1], node] if known else [None, None, node])

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
