"""Rebuild the practice corpus: public TF2/Keras code, pulled at pinned commits.

Why: the rules must be measured on code nobody on the project wrote (issue 17), yet that
code must never enter the repository. So the repository keeps only a description,
``eval/suites/practice.toml`` (repositories, commits, file paths), and this script turns
it into a scratch folder of self-contained packages plus a ``tern eval`` suite::

    python eval/practice_corpus.py build --suite eval/suites/practice.toml --into /tmp/practice
    python eval/practice_corpus.py check --into /tmp/practice     # the TF tests must pass
    tern eval /tmp/practice/suite.toml

Each package is one directory: an empty ``__init__.py`` and its files, flattened by
basename (a package's ``__init__.py`` becomes ``<its folder>.py``). Imports of the
package's own copied modules become relative (``from keras_cv.layers.x import Y`` ->
``from .x import Y``; a name re-exported by a package ``__init__`` that is not copied is
found in the copied module that defines it); relative imports of modules not copied
become absolute; every other import stays as written. Files are read from a bare mirror
(``ROOT/<owner>+<name>/repo``) with ``git show COMMIT:PATH``; without one, from a
blob-less clone of https://github.com/OWNER/NAME cached under ``~/.cache/tern-practice``.
Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tern-practice"


class CorpusError(Exception):
    """A suite or a source that cannot be built: the message says which and why."""


def git_dir(repo: str, commit: str, mirror_root: Path) -> Path:
    """A git directory holding ``commit`` of ``repo``: the local mirror, else a cached clone."""
    mirror = mirror_root / repo.replace("/", "+") / "repo"
    if mirror.is_dir():
        return mirror
    clone = CACHE / repo.replace("/", "+")
    if not clone.is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        url = f"https://github.com/{repo}"
        _git(None, "clone", "--bare", "--filter=blob:none", url, str(clone))
    if subprocess.run(["git", "-C", str(clone), "cat-file", "-e", f"{commit}^{{commit}}"],
                      check=False, capture_output=True).returncode != 0:
        _git(clone, "fetch", "origin", commit)
    return clone


def _git(where: Path | None, *args: str) -> str:
    cmd = ["git", *(["-C", str(where)] if where else []), *args]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise CorpusError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done.stdout


def module_name(path: str) -> str:
    """``a/b/c.py`` -> ``a.b.c``; ``a/b/__init__.py`` -> ``a.b``."""
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def flat_name(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    return parts[-2] if parts[-1] == "__init__" else parts[-1]


def top_level_names(source: str) -> set[str]:
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


class Localizer:
    """Rewrites one package's imports of its own copied modules to relative ones."""

    def __init__(self, sources: dict[str, str]):
        self.flat = {module_name(p): flat_name(p) for p in sources}  # module -> flat name
        self.defines = {module_name(p): top_level_names(s) for p, s in sources.items()}

    def _owner(self, package: str, name: str) -> str | None:
        """The copied module under ``package`` that defines ``name``, when exactly one does."""
        owners = [m for m, names in self.defines.items()
                  if m.startswith(package + ".") and name in names]
        return self.flat[owners[0]] if len(owners) == 1 else None

    def _from(self, node: ast.ImportFrom, here: str) -> list[str] | None:
        base = node.module or ""
        if node.level:
            package = here.split(".")[: len(here.split(".")) - node.level]
            base = ".".join(package + ([base] if base else []))
        if base in self.flat:
            return [f"from .{self.flat[base]} import {_aliases(node.names)}"]
        lines, kept = [], []
        for alias in node.names:
            full = f"{base}.{alias.name}"
            if full in self.flat:
                local = self.flat[full]
                target = alias.asname or alias.name
                lines.append(f"from . import {local}" + (f" as {target}" if target != local else ""))
            elif (owner := self._owner(base, alias.name)) is not None:
                lines.append(f"from .{owner} import {_aliases([alias])}")
            else:
                kept.append(alias)
        if not lines and not node.level:
            return None  # nothing of ours: leave the statement exactly as written
        if kept:
            lines.insert(0, f"from {base} import {_aliases(kept)}")
        return lines

    def rewrite(self, path: str, source: str) -> str:
        here = module_name(path) + (".__init__" if path.endswith("__init__.py") else "")
        lines = source.splitlines(keepends=True)
        edits = []
        for node in ast.walk(ast.parse(source)):
            new = None
            if isinstance(node, ast.ImportFrom):
                new = self._from(node, here)
            elif isinstance(node, ast.Import) and any(a.name in self.flat for a in node.names):
                if any(a.name in self.flat and not a.asname for a in node.names):
                    raise CorpusError(f"{path}:{node.lineno}: `import {node.names[0].name}` "
                                      "without `as` cannot be made relative; leave the file out")
                new = [f"from . import {self.flat[a.name]} as {a.asname}" if a.name in self.flat
                       else f"import {_aliases([a])}" for a in node.names]
            if new is not None:
                edits.append((node.lineno, node.end_lineno, node.col_offset, new))
        for start, end, col, new in sorted(edits, reverse=True):
            indent = lines[start - 1][:col]
            lines[start - 1:end] = [indent + line + "\n" for line in new]
        return "".join(lines)


def _aliases(names: list[ast.alias]) -> str:
    return ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in names)


def load(suite_path: Path) -> tuple[str, dict, list[dict]]:
    with open(suite_path, "rb") as f:
        data = tomllib.load(f)
    sources = {s["name"]: s for s in data.get("source", [])}
    packages = data.get("package", [])
    seen = set()
    for pkg in packages:
        name = pkg.get("name", "")
        if not name.isidentifier() or name in seen:
            raise CorpusError(f"{suite_path}: package name {name!r} is not a unique identifier")
        if pkg.get("source") not in sources:
            raise CorpusError(f"{suite_path}: package {name}: unknown source {pkg.get('source')!r}")
        seen.add(name)
    return data.get("suite", {}).get("name", suite_path.stem), sources, packages


def build(suite_path: Path, into: Path, mirror_root: Path) -> None:
    name, sources, packages = load(suite_path)
    into.mkdir(parents=True, exist_ok=True)
    header = f"# Built by eval/practice_corpus.py from {suite_path.name}; do not edit.\n"
    cases = [header + f'[suite]\nname = "{name}"\n']
    for pkg in packages:
        src = sources[pkg["source"]]
        where = git_dir(src["repo"], src["commit"], mirror_root)
        texts = {p: _git(where, "show", f"{src['commit']}:{p}") for p in pkg["files"]}
        flats: dict[str, str] = {}
        for p in texts:
            if (other := flats.setdefault(flat_name(p), p)) != p:
                raise CorpusError(f"package {pkg['name']}: {p} and {other} both flatten "
                                  f"to {flat_name(p)}.py")
        out = into / pkg["name"]
        out.mkdir(exist_ok=True)
        for stale in out.glob("*.py"):
            stale.unlink()
        (out / "__init__.py").write_text("")
        localizer = Localizer(texts)
        for p, text in texts.items():
            (out / f"{flat_name(p)}.py").write_text(localizer.rewrite(p, text))
        case = f'\n[[case]]\npath = "{pkg["name"]}"\n'
        if "expect" in pkg:
            case += f'expect = "{pkg["expect"]}"\n'
        config = {**pkg.get("config", {}), **({"keras": pkg["keras"]} if "keras" in pkg else {})}
        if config:
            case += "config = { " + ", ".join(f"{k} = {_toml(v)}" for k, v in config.items()) + " }\n"
        cases.append(case)
        print(f"{pkg['name']}: {len(texts)} files")
    (into / "suite.toml").write_text("".join(cases))


def _toml(value) -> str:
    """A TOML literal for a config value (strings, numbers, booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def check(into: Path, only: list[str]) -> int:
    """Run every built package's TF tests; one line each: pass/FAIL and the first error."""
    with open(into / "suite.toml", "rb") as f:
        cases = tomllib.load(f).get("case", [])
    failed = 0
    for case in cases:
        name = case["path"]
        if only and name not in only:
            continue
        env = dict(os.environ)
        env.pop("TF_USE_LEGACY_KERAS", None)
        if case.get("config", {}).get("keras") == "tf_keras":
            env["TF_USE_LEGACY_KERAS"] = "1"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", name],
            check=False, cwd=into, env=env, capture_output=True, text=True)
        out = done.stdout.splitlines()
        summary = next((l for l in reversed(out) if re.search(r"passed|failed|error", l)), "")
        if done.returncode == 0:
            print(f"{name:32} pass  {summary.strip('= ')}")
            continue
        failed += 1
        first = next((l for l in out if l.startswith("E ")), summary or (out or ["?"])[-1])
        print(f"{name:32} FAIL  {first[:160]}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write the packages and suite.toml into DIR")
    b.add_argument("--suite", type=Path, default=Path(__file__).parent / "suites/practice.toml")
    b.add_argument("--into", type=Path, required=True)
    b.add_argument("--mirror", type=Path, default=Path("/work/.mirror"))
    c = sub.add_parser("check", help="run each built package's TF tests")
    c.add_argument("--into", type=Path, required=True)
    c.add_argument("packages", nargs="*", help="only these packages")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build(args.suite, args.into, args.mirror)
            return 0
        return check(args.into, args.packages)
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
