"""TensorFlow a translation keeps on purpose: where it stands, and whether that is all.

Read from a translation's text (``ast``) against the allowance records (``rules/allowed/``):
a reference to a tf.data symbol is allowed, except inside a function compiled with
``jax.jit``; a TF op inside a function tf.data runs in its graph (``ds.map(fn)``) is
allowed too; any other TensorFlow or Keras is residue. One reading serves the migrate
report (allowed uses with their lines), ``finalize_imports`` (an import used only for
allowed TF gets a plain comment, not a TODO), the evaluation's "TensorFlow left", the
fixture checks and the verifier's choice of worker.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from tern.engine.ast_walks import children as ast_children, statements
from tern.features.tf_data.datasets import MODULE_SCOPE, FileDatasets, PackageDatasets, Resolver, dotted, file_datasets, scan_module
from tern.engine.names import SOURCE_ROOTS, ast_bindings, ast_scope, parsed, short_name
from tern.engine.parsed_files import parsed_file
from tern.engine.records import Tables, tables as default_tables
from tern.engine.report import AllowedUse


@dataclass(frozen=True)
class KeptImport:
    line: int
    statement: str
    bindings: tuple[str, ...]
    allowed_only: bool  # every binding is used, and only for allowed TF


@dataclass(frozen=True)
class Kept:
    allowed: tuple[AllowedUse, ...]
    other: tuple[tuple[int, str], ...]  # (line, construct) of TF that is not allowed
    imports: tuple[KeptImport, ...]

    @property
    def allowed_bindings(self) -> frozenset[str]:
        """Import names whose every use is allowed TF."""
        return frozenset(b for i in self.imports if i.allowed_only for b in i.bindings)

    @property
    def imports_tf(self) -> bool:
        return bool(self.imports)

    @property
    def only_allowed(self) -> bool:
        """TF imported, and for allowed uses alone."""
        return bool(self.imports) and all(i.allowed_only for i in self.imports) and not self.other


def _is_jit(decorator: ast.expr) -> bool:
    node = decorator.func if isinstance(decorator, ast.Call) else decorator
    if dotted(node) == "jax.jit":
        return True
    return (isinstance(decorator, ast.Call) and (dotted(decorator.func) or "").endswith("partial")
            and bool(decorator.args) and dotted(decorator.args[0]) == "jax.jit")


class _Reader:
    def __init__(self, tree: ast.Module, package: PackageDatasets, table: Tables, resolve: Resolver):
        self.tree = tree
        self.resolve = resolve
        self.table = table
        self.facts: FileDatasets | None = file_datasets(tree, package, table, resolve=resolve)
        self.top = {id(node) for node in tree.body}
        self.allowed: list[AllowedUse] = []
        self.other: list[tuple[int, str]] = []
        self.uses: dict[str, bool] = {}  # binding -> every use allowed so far
        self._graph: set[int] = set()

    def walk(self, node: ast.AST, shadow: frozenset[str], scope: str, params: set[str], jit: bool, graph: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for default in (*node.args.defaults, *[d for d in node.args.kw_defaults if d is not None]):
                self.walk(default, shadow, scope, params, jit, graph)
            graph = graph or id(node) in self._graph
            if not isinstance(node, ast.Lambda):
                top = id(node) in self.top
                graph = graph or (top and self.facts is not None and node.name in self.facts.graph_functions)
                for decorator in node.decorator_list:  # a graph function's decorators stay TF too
                    self.walk(decorator, shadow, scope, params, jit, graph)
                jit = jit or any(_is_jit(d) for d in node.decorator_list)
                scope, params = node.name, set(self.facts.params.get(node.name, ())) if self.facts else set()
            bound, imports = ast_scope(node)
            inner = shadow | (bound - set(imports))
            for child in (node.body if isinstance(node.body, list) else [node.body]):
                self.walk(child, inner, scope, params, jit, graph)
            return
        if isinstance(node, ast.Call) and self.facts is not None:
            self._graph.update(id(arg) for arg in self.facts.graph_args(node, scope, params) if isinstance(arg, ast.Lambda))
        if isinstance(node, (ast.Attribute, ast.Name)) and isinstance(node.ctx, ast.Load):
            head = node
            while isinstance(head, ast.Attribute):
                head = head.value
            if isinstance(head, ast.Name) and head.id in self.resolve.bindings and head.id not in shadow:
                self._reference(node, head, jit, graph)  # the whole chain, from its top: not entered again
                return
        for child in ast_children(node):
            self.walk(child, shadow, scope, params, jit, graph)

    def _reference(self, top: ast.expr, node: ast.Name, jit: bool, graph: bool) -> None:
        name = self.resolve(top) or self.resolve.dotted(node.id)
        record = self.table.allowance(name)
        why = None
        if record is not None:
            why = None if jit else record.why  # under jax.jit: tf_data_in_jit.py put a TODO
        elif graph:
            why = next((r.graph_why for r in self.table.allowed if r.allowed_in_graph(name)), None)
        if why is None:
            self.other.append((node.lineno, short_name(name)))
        else:
            self.allowed.append(AllowedUse(short_name(name), node.lineno, why))
        self.uses[node.id] = self.uses.get(node.id, True) and why is not None

    def imports(self) -> list[KeptImport]:
        out = []
        for node in statements(self.tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            bound = [local for local, full in ast_bindings(node).items() if local in self.resolve.bindings
                     and self.resolve.bindings[local] == full]
            if bound:
                out.append(KeptImport(node.lineno, ast.unparse(node), tuple(bound),
                                      all(self.uses.get(b, False) for b in bound)))
        return out


def read(text: str, package: PackageDatasets | None = None, table: Tables | None = None,
         tree: ast.Module | None = None) -> Kept | None:
    """What TF ``text`` keeps; None when it does not parse. ``tree``: ``text`` parsed, if it was."""
    try:
        tree = tree or parsed(text)
    except (SyntaxError, ValueError):
        return None
    table = table or default_tables()
    resolve = Resolver(tree, table)
    if not resolve.bindings:
        return Kept((), (), ())
    if package is None:  # a lone file is its own package
        package = PackageDatasets()
        scan_module(tree, package, table, source=text, resolve=resolve)
    reader = _Reader(tree, package, table, resolve)
    reader.walk(tree, frozenset(), MODULE_SCOPE, set(), False, False)
    return Kept(tuple(reader.allowed), tuple(reader.other), tuple(reader.imports()))


def read_tree(root: Path) -> dict[Path, Kept]:
    """Every Python file of a translated tree, read with the tree as its package."""
    files = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    texts, trees = {}, {}
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            trees[path] = parsed_file(text)
        except (SyntaxError, ValueError):
            continue
        texts[path] = text
    package = PackageDatasets()
    for path, tree in trees.items():
        scan_module(tree, package, source=texts[path])
    return {path: kept for path, tree in trees.items() if (kept := read(texts[path], package, tree=tree)) is not None}


#: ``tree_keeps_only_allowed_tf`` by a digest of the tree's files: a long-lived process (the
#: daemon) asks again on every verify, and reading the tree is most of a cached verify
_ONLY_ALLOWED: dict[bytes, bool] = {}
#: ``import`` or ``from``, then on the same line (or one continued with a backslash) a root TF is
#: imported by, as a word (``_keras_compat`` is none): every import statement binding TF has
#: this, and a docstring's "`tf.keras.Model`" has not. In a file that is not ASCII an identifier
#: may spell a root otherwise (NFKC), so such a file is read whatever it holds.
_TF_IMPORT = re.compile(rb"\b(?:import|from)\b(?:[^\n]|\\\n)*?\b(?:" + b"|".join(r.encode() for r in SOURCE_ROOTS)
                        + rb")\b")


def tree_keeps_only_allowed_tf(root: Path) -> bool:
    """The tree imports TensorFlow, and every TF use in it is allowed (tf.data): it needs a
    worker with TensorFlow (for tf.data) but never Keras."""
    digest = hashlib.sha256()
    may_import = False
    for path in sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts):
        data = path.read_bytes()
        digest.update(f"{path.relative_to(root)}\0{len(data)}\0".encode())
        digest.update(data)
        may_import = may_import or not data.isascii() or _TF_IMPORT.search(data) is not None
    key = digest.digest()
    if not may_import:  # no file imports TF: nothing to read
        return False
    if key not in _ONLY_ALLOWED:
        importing = [k for k in read_tree(root).values() if k.imports_tf]
        if len(_ONLY_ALLOWED) >= 256:
            _ONLY_ALLOWED.clear()
        _ONLY_ALLOWED[key] = bool(importing) and all(k.only_allowed for k in importing)
    return _ONLY_ALLOWED[key]
