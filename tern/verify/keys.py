"""What a verification result depends on, hashed into its cache key.

- versions of the libraries that run it (TensorFlow/Keras for recordings, JAX/Flax for
  replays and translated tests) and tern's own code and rule tables;
- the sources it reads: the whole TF package for a recording (its tests exercise any of
  it), and for a replay or a translated test file, that file plus the package modules
  it imports, transitively (so an edit re-runs only what imports the edited module).
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

from tern.engine.ast_walks import statements
from tern.engine.parsed_files import parsed_file
from tern.sandbox.identity import JAX_LIBRARIES, TF_LIBRARIES, digest, tern_fingerprint, versions

__all__ = ["JAX_LIBRARIES", "TF_LIBRARIES", "digest", "tern_fingerprint", "versions"]  # the sandbox's, here with the rest of a job's key

def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def module_file(root: Path, package: str, name: str) -> Path | None:
    """The file of module ``name`` (dotted, starting with ``package``) under ``root``."""
    parts = name.split(".")
    if parts[0] != package:
        return None
    base = root.joinpath(*parts[1:]) if len(parts) > 1 else root
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def local_imports(path: Path, root: Path, package: str) -> set[Path]:
    """Files of ``package`` (rooted at ``root``) that ``path`` imports directly."""
    here = path.relative_to(root).with_suffix("").parts
    found: set[Path] = set()
    for name in imported_names(path.read_bytes(), (package, *here[:-1])):
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__
            hit = module_file(root, package, ".".join(parts[:depth]))
            if hit is not None:
                found.add(hit)
    return found


@functools.lru_cache(maxsize=2048)
def imported_names(source: bytes, current: tuple[str, ...]) -> tuple[str, ...]:
    """The absolute module names a source imports (``current``: its package, for relative
    imports). Kept per content: a cached verify asks again for every file it hashes, and
    parsing was most of its time in the daemon. A UTF-8 file is parsed as the text
    ``Path.read_text`` gives, through ``parsed_file``: the static defaults read the same
    tree of an edited module again."""
    try:
        try:
            text = source.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")  # read_text's newlines
        except UnicodeDecodeError:  # another encoding, declared in the file: the bytes say which
            tree = ast.parse(source)
        else:
            tree = parsed_file(text)
    except (SyntaxError, ValueError):
        return ()
    names: list[str] = []
    for node in statements(tree):  # an import is a statement: expressions are not walked
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(current[: len(current) - node.level + 1])
                module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            else:
                module = node.module or ""
            names += [module, *(f"{module}.{a.name}" for a in node.names)]
    return tuple(names)


def closure_hash(path: Path, root: Path, package: str) -> str:
    """Hash of ``path`` and every package file it imports, transitively."""
    seen: set[Path] = set()
    todo = [path, root / "__init__.py"]
    while todo:
        current = todo.pop()
        if current in seen or not current.is_file():
            continue
        seen.add(current)
        todo.extend(local_imports(current, root, package))
    h = hashlib.sha256()
    for file in sorted(seen):
        h.update(str(file.relative_to(root)).encode())
        h.update(file.read_bytes())
    return h.hexdigest()
