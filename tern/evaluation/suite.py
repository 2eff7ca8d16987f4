"""What ``tern eval`` runs: suites of cases, read from a directory or a TOML file.

A *case* is one TF package to migrate and verify, or one ready-made translation (a
person's, an LLM's, a deliberately wrong one) to verify against its original.

A directory suite is searched for packages: a directory with ``__init__.py`` whose parent
has none. Packages that import no TensorFlow/Keras but do import JAX/Flax are
translations; each is paired with the TF package of the same name in the suite (and
left out, with a note, when there is none or more than one). Hidden folders,
``__pycache__``, tern's outputs (``*_jax``) and golden translations (folders named
``expected``, ``golden`` or ``goldens``) are not searched.

A TOML suite lists its cases (paths relative to the file)::

    [suite]
    name = "fixtures"                     # default: the file's stem

    [[case]]
    path = "../../fixtures/tf/custom_dense"
    name = "custom_dense"                 # default: the directory's name; unique
    expect = "verified"                   # optional: the status this case should reach
    original = "../../fixtures/tf/x"      # optional: path is a translation of this TF package
    config = { rtol = 1e-4, atol = 1e-4 } # optional: [tool.tern.verify] keys (and keras)
"""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tern.status import Grade

SKIP_DIRS = {"__pycache__", "expected", "golden", "goldens", "node_modules", "build", "dist"}
CONFIG_KEYS = {"rtol", "atol", "timeout", "memory_mb", "tolerances", "cases", "keras"}
TF_ROOTS = {"tensorflow", "keras", "tf_keras"}
JAX_ROOTS = {"jax", "flax"}


class SuiteError(ValueError):
    """A suite that cannot be read: the message is one line naming the file and the problem."""


@dataclass(frozen=True)
class Case:
    suite: str
    name: str
    path: Path  # the TF package, or the translation when ``original`` is set
    original: Path | None = None
    expect: str | None = None
    config: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def id(self) -> str:
        return f"{self.suite}/{self.name}"

    @property
    def kind(self) -> str:
        return "translation" if self.original is not None else "migrate"

    @property
    def tf_package(self) -> Path:
        """The package the recordings come from."""
        return self.original or self.path


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    cases: tuple[Case, ...]
    notes: tuple[str, ...] = ()  # packages left out, and why


def load_suite(path: Path) -> Suite:
    if path.is_dir():
        return _from_directory(path.resolve())
    if path.is_file():
        return _from_toml(path.resolve())
    raise SuiteError(f"{path}: no such suite (a directory of TF packages or a .toml file)")


def _is_package(path: Path) -> bool:
    return (path / "__init__.py").is_file()


def find_packages(root: Path) -> list[Path]:
    """Top-level packages under ``root`` (``root`` itself when it is one)."""
    if _is_package(root):
        return [root]
    found = []
    for child in sorted(root.iterdir()):
        if not child.is_dir() or child.name.startswith(".") or child.name in SKIP_DIRS or child.name.endswith("_jax"):
            continue
        found.extend([child] if _is_package(child) else find_packages(child))
    return found


def imported_roots(package: Path) -> set[str]:
    """Top-level names the package's modules import (files that do not parse are skipped)."""
    roots: set[str] = set()
    for path in package.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                roots.add(node.module.split(".")[0])
    return roots


def _from_directory(root: Path) -> Suite:
    packages = find_packages(root)
    if not packages:
        raise SuiteError(f"{root}: no Python packages (directories with __init__.py) found")
    kinds = {p: imported_roots(p) for p in packages}
    translations = {p for p, r in kinds.items() if not r & TF_ROOTS and r & JAX_ROOTS}
    originals: dict[str, list[Path]] = {}
    for package in packages:
        if package not in translations:
            originals.setdefault(package.name, []).append(package)
    cases, notes = [], []
    for package in packages:
        name = package.relative_to(root).as_posix() if package != root else package.name
        if package not in translations:
            cases.append(Case(root.name, name, package))
            continue
        matches = originals.get(package.name, [])
        if len(matches) != 1:
            why = "no TF package" if not matches else f"{len(matches)} TF packages"
            notes.append(f"{name}: a JAX/Flax package with {why} named {package.name} in the suite; left out")
            continue
        cases.append(Case(root.name, name, package, original=matches[0]))
    return Suite(root.name, root, tuple(cases), tuple(notes))


def _from_toml(path: Path) -> Suite:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SuiteError(f"{path}: not valid TOML ({exc})") from None
    meta = data.get("suite", {})
    if not isinstance(meta, dict):
        raise SuiteError(f"{path}: [suite] must be a table")
    name = str(meta.get("name") or path.stem)
    raw_cases = data.get("case")
    if not isinstance(raw_cases, list) or not raw_cases:
        raise SuiteError(f"{path}: no [[case]] entries")
    cases: list[Case] = []
    for index, raw in enumerate(raw_cases, 1):
        where = f"{path}: case {index}"
        if not isinstance(raw, dict) or not isinstance(raw.get("path"), str):
            raise SuiteError(f"{where}: needs path = \"...\" (relative to the suite file)")
        unknown = set(raw) - {"path", "name", "expect", "original", "config"}
        if unknown:
            raise SuiteError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        package = (path.parent / raw["path"]).resolve()
        if not _is_package(package):
            raise SuiteError(f"{where}: {package} is not a package directory (no __init__.py)")
        original = None
        if raw.get("original") is not None:
            original = (path.parent / str(raw["original"])).resolve()
            if not _is_package(original):
                raise SuiteError(f"{where}: original {original} is not a package directory (no __init__.py)")
            if original.name != package.name:
                raise SuiteError(f"{where}: a translation keeps its package's name: {package.name} != {original.name}")
        expect = raw.get("expect")
        if expect is not None and expect not in tuple(Grade):
            raise SuiteError(f"{where}: expect must be one of {', '.join(Grade)}, not {expect!r}")
        config = raw.get("config", {})
        if not isinstance(config, dict) or set(config) - CONFIG_KEYS:
            raise SuiteError(f"{where}: config takes {', '.join(sorted(CONFIG_KEYS))}")
        cases.append(Case(name, str(raw.get("name") or package.name), package, original, expect, dict(config)))
    seen: set[str] = set()
    for case in cases:
        if case.name in seen:
            raise SuiteError(f"{path}: two cases named {case.name!r}; give one a name = \"...\"")
        seen.add(case.name)
    return Suite(name, path, tuple(cases))


def load_suites(paths: list[Path]) -> list[Suite]:
    suites = [load_suite(p) for p in paths]
    names = [s.name for s in suites]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SuiteError(f"two suites named {duplicates[0]!r}; give a TOML suite its own [suite] name")
    return suites
