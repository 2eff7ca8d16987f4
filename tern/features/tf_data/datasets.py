"""What is statically a tf.data dataset, and which functions tf.data runs in its TF graph.

The allowance record (``rules/allowed/tf_data.toml``) keeps tf.data as written; to do that
safely the translation must know which ``for`` loops iterate a dataset (they are bridged
to NumPy), which functions passed to ``Dataset.map`` and friends run in TF's graph (they
stay TF), and which package functions return a dataset (a test iterates what
``make_dataset()`` returns). One answer for the original source, the package pre-pass and
a translation's output: Python's ``ast``, with names resolved through the file's imports
(every scope's, shadowing ignored: a local named ``tf`` beside ``import tensorflow as tf``
is not worth a scope analysis here).

A dataset is: a call of a tf.data constructor, a dataset method (``.batch``...) on a
dataset, a call of a package function that returns one, a local assigned one, and (in a
package that uses tf.data) a function parameter, since a caller may pass one.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field

from tern.engine.ast_walks import children as ast_children, statements, walk as ast_walk
from tern.engine.names import SOURCE_ROOTS, Canonicalizer, ast_bindings
from tern.engine.records import AllowedRecord, Tables, tables as default_tables

MODULE_SCOPE = ""  # the scope name of module-level code


def tf_data(table: Tables | None = None) -> AllowedRecord | None:
    """The allowance record that knows datasets (the one with dataset methods)."""
    return next((r for r in (table or default_tables()).allowed if r.methods), None)


def dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


class Resolver:
    """Canonical TF/Keras name of a ``Name``/``Attribute`` chain, through the file's imports."""

    def __init__(self, tree: ast.AST, table: Tables | None = None):
        self.bindings: dict[str, str] = {}
        for node in statements(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for local, full in ast_bindings(node).items():
                    if full.split(".")[0] in SOURCE_ROOTS:
                        self.bindings[local] = full
        self._canonical = Canonicalizer((table or default_tables()).canonical)

    def __call__(self, node: ast.expr) -> str | None:
        name = dotted(node)
        return None if name is None else self.dotted(name)

    def dotted(self, name: str) -> str | None:
        head, _, rest = name.partition(".")
        full = self.bindings.get(head)
        if full is None:
            return None
        return self._canonical(f"{full}.{rest}" if rest else full)


@dataclass
class PackageDatasets:
    """Package pre-pass facts: which package functions return a dataset.

    ``returns`` maps a top-level function to what its ``return`` statements give: ``""``
    for a tf.data dataset built there, or the names of package functions whose result it
    returns (resolved lazily, so module order does not matter).
    """

    returns: dict[str, set[str]] = field(default_factory=dict)
    used: bool = False  # some module of the package uses tf.data

    def returns_dataset(self, name: str, _seen: frozenset[str] = frozenset()) -> bool:
        roots = self.returns.get(name)
        if not roots or name in _seen:
            return False
        return "" in roots or any(self.returns_dataset(r, _seen | {name}) for r in roots)


class _Judge:
    """Decides ``is this expression a dataset`` in one scope of one file."""

    def __init__(self, record: AllowedRecord, resolve: Resolver, package: PackageDatasets,
                 local: dict[str, str], params: set[str], prepass: bool = False):
        self.record, self.resolve, self.package = record, resolve, package
        self.local, self.params = local, params  # local: name -> root of what it was assigned
        self.prepass = prepass  # the package pre-pass: callees are decided once all modules are seen

    def root(self, node: ast.expr) -> str | None:
        """``""`` when ``node`` is a tf.data dataset, the package function it comes from
        when it is that function's result, else None."""
        while True:
            if isinstance(node, ast.Call):
                func = node.func
                name = self.resolve(func)
                if name is not None:
                    return "" if self.record.makes_dataset(name) else None
                if isinstance(func, ast.Attribute) and func.attr in self.record.methods:
                    node = func.value
                    continue
                callee = func.id if isinstance(func, ast.Name) else (
                    func.attr if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None)
                return callee if callee is not None and self._may_return(callee) else None
            if isinstance(node, ast.Name):
                if node.id in self.local:
                    return self.local[node.id]
                if node.id in self.params and self.package.used:
                    return ""
            return None

    def _may_return(self, callee: str) -> bool:
        return self.prepass or self.package.returns_dataset(callee)

    def __call__(self, node: ast.expr) -> bool:
        return self.root(node) is not None


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    args = fn.args
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    return names - {"self", "cls"}


def _own_nodes(body: list[ast.stmt]):
    """Nodes of a scope's body, not descending into nested functions or classes."""
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        for child in reversed(ast_children(node)):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                stack.append(child)


def _dataset_locals(body: list[ast.stmt], judge: _Judge) -> dict[str, str]:
    """Names assigned a dataset anywhere in the scope (``ds = ds.shuffle(...)`` included),
    each with the root of what it holds (see ``_Judge.root``)."""
    assigns = []
    for node in statements(body, own=True):
        if isinstance(node, ast.Assign):
            assigns += [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            assigns.append((node.target.id, node.value))
    changed = True
    while changed:
        changed = False
        for name, value in assigns:
            if name not in judge.local and (root := judge.root(value)) is not None:
                judge.local[name] = root
                changed = True
    return judge.local


def _scopes(tree: ast.Module):
    """(scope name, params, body) of module-level code and of every function, any depth."""
    yield MODULE_SCOPE, set(), tree.body
    for node in statements(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, _params(node), node.body


def uses_tf_data(tree: ast.AST, resolve: Resolver, record: AllowedRecord, source: str | None = None) -> bool:
    if any(record.covers(full) for full in resolve.bindings.values()):
        return True
    if not resolve.bindings or (source is not None and record.prefix.rpartition(".")[2] not in source):
        return False  # no TF import, or no `.data` anywhere in the text: no walk needed
    return any(
        isinstance(node, ast.Attribute) and node.attr == "data" and (name := resolve(node)) is not None
        and record.covers(name)
        for node in ast_walk(tree)
    )


def scan_module(tree: ast.Module, package: PackageDatasets, table: Tables | None = None, *,
                source: str | None = None, resolve: Resolver | None = None) -> None:
    """The pre-pass over one module: what its top-level functions return, tf.data used."""
    record = tf_data(table)
    if record is None:
        return
    resolve = resolve or Resolver(tree, table)
    if not package.used and uses_tf_data(tree, resolve, record, source):
        package.used = True
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        judge = _Judge(record, resolve, package, {}, set(), prepass=True)
        _dataset_locals(node.body, judge)
        roots = {judge.root(n.value) for n in statements(node.body, own=True) if isinstance(n, ast.Return) and n.value is not None}
        if roots and None not in roots:
            package.returns[node.name] = roots


@dataclass
class FileDatasets:
    """One file's facts, from its source: dataset locals per scope, graph functions."""

    record: AllowedRecord
    resolve: Resolver
    package: PackageDatasets
    locals: dict[str, dict[str, str]] = field(default_factory=dict)
    params: dict[str, set[str]] = field(default_factory=dict)
    graph_functions: frozenset[str] = frozenset()

    def judge(self, scope: str, params: set[str] | None = None) -> _Judge:
        """The judge for one function (by name; module-level datasets are seen from it too)."""
        local = {**self.locals.get(MODULE_SCOPE, {}), **self.locals.get(scope, {})}
        return _Judge(self.record, self.resolve, self.package, local,
                      self.params.get(scope, set()) if params is None else params)

    def is_dataset(self, node: ast.expr, scope: str, params: set[str] | None = None) -> bool:
        return self.judge(scope, params)(node)

    def graph_args(self, call: ast.Call, scope: str, params: set[str] | None = None) -> list[ast.expr]:
        """The arguments of ``dataset.map(fn)`` (and the other graph methods) that are functions
        tf.data traces into its graph; [] when ``call`` is no such call."""
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr in self.record.graph_methods):
            return []
        if not self.is_dataset(func.value, scope, params):
            return []
        out = []
        for position, name in self.record.graph_params(func.attr):
            if position < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
                out.append(call.args[position])
            out += [k.value for k in call.keywords if k.arg == name]
        return out


def file_datasets(tree: ast.Module, package: PackageDatasets, table: Tables | None = None, *,
                  resolve: Resolver | None = None) -> FileDatasets | None:
    """Facts for one file, or None when tf.data plays no part in it or its package."""
    record = tf_data(table)
    if record is None:
        return None
    resolve = resolve or Resolver(tree, table)
    if not package.used and not uses_tf_data(tree, resolve, record):
        return None
    facts = FileDatasets(record, resolve, package)
    for scope, params, body in _scopes(tree):
        judge = facts.judge(scope, params)  # module-level code comes first: its datasets are seen
        facts.locals.setdefault(scope, {}).update(_dataset_locals(body, judge))
        facts.params.setdefault(scope, set()).update(params)
    facts.graph_functions = frozenset(_graph_functions(tree, facts))
    return facts


def _graph_functions(tree: ast.Module, facts: FileDatasets) -> set[str]:
    """Module-level functions passed to a graph method of a dataset, and those they call."""
    defined = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    found: set[str] = set()
    bodies: list[ast.AST] = []
    for scope, params, body in _scopes(tree):
        for node in _own_nodes(body):
            if isinstance(node, ast.Call):
                for arg in facts.graph_args(node, scope, params):
                    if isinstance(arg, ast.Lambda):
                        bodies.append(arg)
                    elif isinstance(arg, ast.Name) and arg.id in defined:
                        found.add(arg.id)
    bodies += [defined[n] for n in found]
    while bodies:
        for node in ast_walk(bodies.pop()):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                name = node.func.id
                if name in defined and name not in found:
                    found.add(name)
                    bodies.append(defined[name])
    return found


@functools.lru_cache(maxsize=512)
def parse_expression(text: str) -> ast.expr | None:
    """An expression's code (from LibCST) as ``ast``; None if it is not one on its own."""
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        try:
            return ast.parse(f"(\n{text}\n)", mode="eval").body
        except SyntaxError:
            return None
