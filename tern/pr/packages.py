"""Which packages ``tern pr`` considers, what each is called, and where its translation goes.

Candidates, when no PATH is given: the ``packages`` of ``[tool.tern.pr]`` in the
repository's ``pyproject.toml`` (paths or globs, relative to the repository root), or with
``--discover`` (or ``discover = true``) every top-level package directory that imports
TensorFlow or Keras and is not itself a tern translation.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tern.pr.git import Git

TF_IMPORT = re.compile(r"^\s*(?:import|from)\s+(?:tensorflow|keras|tf_keras)\b", re.MULTILINE)
REPORT_SUFFIXES = (".tern-report.json", ".tern-report.md")
VERIFY_SUFFIXES = (".tern-verify.json", ".tern-verify.md")


class SelectionError(ValueError):
    """Bad usage: a path that is no package, a config that does not parse, a name clash."""


@dataclass(frozen=True)
class Package:
    rel: str  # the TF package directory, relative to the repository root (posix)
    name: str  # in branch names: tern/migrate-<name>
    out_rel: str  # the translation's directory, relative to the repository root

    @property
    def translation_paths(self) -> list[str]:
        """What the migration owns in the repository: compared to decide "changed"."""
        return [self.out_rel, *(self.out_rel + s for s in REPORT_SUFFIXES)]

    @property
    def verify_paths(self) -> list[str]:
        return [self.out_rel + s for s in VERIFY_SUFFIXES]


@dataclass(frozen=True)
class PrConfig:
    packages: tuple[str, ...] = ()
    discover: bool = False
    base: str | None = None
    remote: str | None = None
    labels: tuple[str, ...] | None = None
    out_root: str | None = None
    group: str | None = None
    source: str = ""


def load_config(root: Path) -> PrConfig:
    path = root / "pyproject.toml"
    if not path.is_file():
        return PrConfig()
    try:
        data = tomllib.loads(path.read_text()).get("tool", {}).get("tern", {}).get("pr", {})
    except tomllib.TOMLDecodeError as exc:
        raise SelectionError(f"{path}: {exc}") from exc
    known = {"packages", "discover", "base", "remote", "labels", "out_root", "group"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise SelectionError(f"{path}: unknown keys in [tool.tern.pr]: {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    packages = data.get("packages", [])
    labels = data.get("labels")
    if not isinstance(packages, list) or not all(isinstance(p, str) for p in packages):
        raise SelectionError(f"{path}: [tool.tern.pr] packages must be a list of paths")
    return PrConfig(packages=tuple(packages), discover=bool(data.get("discover", False)), base=data.get("base"),
                    remote=data.get("remote"), labels=tuple(labels) if labels is not None else None,
                    out_root=data.get("out_root"), group=data.get("group"), source=str(path))


def resolve_paths(root: Path, paths: list[Path]) -> list[str]:
    """Command-line PATHs to repository-relative package directories."""
    found = []
    for path in paths:
        full = path.resolve()
        if not full.is_dir():
            raise SelectionError(f"{path}: not a directory (tern pr migrates package directories)")
        try:
            rel = full.relative_to(root).as_posix()
        except ValueError:
            raise SelectionError(f"{path}: outside the repository {root}") from None
        if rel == ".":
            raise SelectionError(f"{path}: the repository root itself is no package; name the package directory")
        found.append(rel)
    return _unique(found)


def configured(root: Path, patterns: tuple[str, ...]) -> list[str]:
    """``[tool.tern.pr] packages``: a plain entry must be a directory; a glob keeps the
    Python packages it matches that are not tern translations."""
    found = []
    for pattern in patterns:
        if any(c in pattern for c in "*?["):
            matches = sorted(p for p in root.glob(pattern) if (p / "__init__.py").is_file() and not is_translation(p))
        elif (root / pattern).is_dir():
            matches = [root / pattern]
        else:
            raise SelectionError(f"[tool.tern.pr] packages: {pattern!r} names no directory under {root}")
        found.extend(m.resolve().relative_to(root).as_posix() for m in matches)
    return _unique(found)


def is_translation(path: Path) -> bool:
    """tern's output: a migrate report beside it."""
    return path.with_name(path.name + REPORT_SUFFIXES[0]).is_file()


def discover(git: Git) -> list[str]:
    """Top-level package directories (``__init__.py``, no package above) with a TF or Keras
    import somewhere below, skipping tern's own translations (a ``.tern-report.json`` beside them)."""
    listed = git.check("ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    files = [p for p in listed if p.endswith(".py") and not any(part.startswith(".") for part in Path(p).parts)]
    inits = {str(Path(p).parent.as_posix()) for p in files if Path(p).name == "__init__.py"}
    tops: dict[str, bool] = {}
    for p in files:
        parts = Path(p).parent.parts
        top = next((Path(*parts[: i + 1]).as_posix() for i in range(len(parts)) if Path(*parts[: i + 1]).as_posix() in inits), None)
        if top is None or is_translation(git.root / top):
            continue
        if not tops.get(top):
            try:
                tops[top] = bool(TF_IMPORT.search((git.root / p).read_text(errors="replace")))
            except OSError:
                tops.setdefault(top, False)
    return sorted(t for t, uses_tf in tops.items() if uses_tf)


def name_packages(rels: list[str], out_root: str | None) -> list[Package]:
    """Name each package after its directory; where two share one, after its whole path
    (``models/a/utils`` -> ``models-a-utils``)."""
    counts: dict[str, int] = {}
    for rel in rels:
        counts[Path(rel).name] = counts.get(Path(rel).name, 0) + 1
    packages = []
    for rel in rels:
        base = Path(rel).name
        name = base if counts[base] == 1 else slug(rel)
        if out_root:
            if counts[base] > 1:
                raise SelectionError(f"--out-root {out_root}: several packages are named {base!r} ({', '.join(r for r in rels if Path(r).name == base)})")
            out_rel = (Path(out_root) / base).as_posix()
        else:
            parent = Path(rel).parent
            out_rel = (parent / f"{base}_jax" / base).as_posix()
        packages.append(Package(rel, name, out_rel))
    return packages


def slug(text: str) -> str:
    """A branch-name-safe form: letters, digits, ``.``, ``_``, ``-``."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")
    return re.sub(r"\.{2,}", ".", cleaned) or "package"


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
