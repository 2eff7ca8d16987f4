"""Run the translation over a tree: pre-pass, per-file workers, atomic writes, report.

Workers return ``(FileResult, text)`` values and never raise for a bad file: an
unparsable or non-UTF-8 file becomes an ``error`` result and is copied unchanged, so the
output tree is complete and the run goes on.
"""

from __future__ import annotations

import difflib
import os
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import libcst as cst

from tern import support_module
from tern.package import PackageInfo, scan_package
from tern.report import FileResult, RunReport
from tern.translate import is_test_path, translate_module

SKIP_DIRS = {"__pycache__", ".git", ".tern", ".hg", ".svn", ".mypy_cache", ".pytest_cache", ".ruff_cache"}


@dataclass(frozen=True)
class Job:
    rel: str
    source: Path
    package: PackageInfo
    support_module: str = support_module.SUPPORT_MODULE  # how the file imports the package's support


def list_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            out.append(Path(dirpath) / name)
    return out


def translate_file(job: Job) -> tuple[FileResult, bytes]:
    """One file to its result and output bytes. Never raises for bad input."""
    raw = job.source.read_bytes()
    if job.source.suffix != ".py":
        return FileResult(job.rel, "copied"), raw
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return FileResult(job.rel, "error", error=f"not UTF-8 (byte {raw[exc.start]:#04x} at offset {exc.start})", error_line=line), raw
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        line, message = _python_syntax_error(text, job.rel, exc)
        return FileResult(job.rel, "error", error=f"does not parse as Python: {message}", error_line=line), raw
    except RecursionError:
        return FileResult(job.rel, "error", error="nesting too deep for the parser", error_line=0), raw
    try:
        result = translate_module(module, is_test=is_test_path(job.rel), package=job.package, source=text,
                                  support_module=job.support_module)
    except Exception as exc:  # a bug in a rule: report it for this file, go on with the rest
        return FileResult(job.rel, "error", error=f"internal error in tern ({type(exc).__name__}: {exc}); the file is copied unchanged", error_line=1), raw
    if result.code == text:
        status = "residue" if result.todos else "unchanged"
    else:
        status = "residue" if result.todos else "translated"
    diff = ""
    if result.code != text:
        diff = "".join(
            difflib.unified_diff(
                text.splitlines(keepends=True), result.code.splitlines(keepends=True),
                fromfile=f"a/{job.rel}", tofile=f"b/{job.rel}",
            )
        )
    return (FileResult(job.rel, status, edits=result.edits, todos=result.todos, allowed=result.allowed, notes=result.notes,
                       diff=diff, support=list(result.support)),
            result.code.encode("utf-8"))


def _python_syntax_error(text: str, rel: str, exc: cst.ParserSyntaxError) -> tuple[int, str]:
    """Line and message as CPython reports them (LibCST's native parser can be a line off)."""
    try:
        compile(text, rel, "exec", dont_inherit=True)
    except SyntaxError as error:
        return error.lineno or exc.raw_line, f"{error.msg} (line {error.lineno}, column {error.offset})"
    except ValueError as error:  # NUL bytes
        return 1, str(error)
    return exc.raw_line, exc.message


def write_atomic(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same directory and rename over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_bytes() == data:
        return
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tern-tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        if path.exists():
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def default_out(source: Path) -> Path:
    """``pkg`` -> ``pkg_jax/pkg``: a root to put on sys.path, the package name kept."""
    source = source.resolve()
    if source.is_file():
        return source.parent.parent / f"{source.parent.name}_jax" / source.parent.name / source.name
    return source.parent / f"{source.name}_jax" / source.name


def migrate(
    source: Path,
    out: Path | None = None,
    *,
    in_place: bool = False,
    dry_run: bool = False,
    jobs: int = 1,
    progress: Callable[[Iterable, int], Iterable] | None = None,
) -> RunReport:
    source = source.resolve()
    if not source.exists():
        raise FileNotFoundError(source)
    target = source if in_place else (out.resolve() if out else default_out(source))
    root = source if source.is_dir() else source.parent
    # the support module an earlier run generated (a rerun on tern's output) is written anew
    files = [f for f in list_files(source) if not support_module.is_generated(f)]
    if any(f.parent == root and f.name == support_module.FILE_NAME for f in files):
        raise ValueError(f"{root / support_module.FILE_NAME} is the name of the support module tern generates "
                         "in every translated package; rename that file first")
    package = scan_package(root, [f for f in files if f.suffix == ".py"])
    imports_from = support_module.import_name(root)
    work = [Job(f.relative_to(root).as_posix(), f, package, imports_from) for f in files]
    report = RunReport(str(source), str(target))
    if jobs > 1 and len(work) > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = pool.map(translate_file, work, chunksize=max(1, len(work) // (jobs * 4)))
            results = list(progress(results, len(work)) if progress else results)
    else:
        results = [translate_file(job) for job in (progress(work, len(work)) if progress else work)]
    for job, (result, data) in zip(work, results):
        report.files.append(result)
        if dry_run:
            continue
        dest = target / job.rel if source.is_dir() else target
        if in_place and result.status in ("copied", "unchanged", "error"):
            continue
        write_atomic(dest, data)
    _write_support(report, target if source.is_dir() else target.parent, dry_run)
    return report


def _write_support(report: RunReport, out_root: Path, dry_run: bool) -> None:
    """The package's support module: exactly what its files import, and what that uses; none
    when nothing does (a module an earlier run left is removed)."""
    wanted = sorted({name for f in report.files for name in f.support})
    path = out_root / support_module.FILE_NAME
    if wanted:
        report.support_module = support_module.FILE_NAME
        report.support = support_module.closure(wanted)
        if not dry_run:
            write_atomic(path, support_module.module_text(wanted).encode("utf-8"))
    elif not dry_run and support_module.is_generated(path):
        path.unlink()
