"""Run the translation over a tree: pre-pass, per-file workers, atomic writes, report.

Do no harm: a run that would write into its own source (without ``--in-place``), or where
nothing can be written, stops before it writes anything (``UsageError``). Past that point
nothing a file does stops the run: workers return ``(FileResult, data)`` values and never
raise for a bad file. An unparsable or undecodable file becomes an ``error`` result and is
copied unchanged; one that cannot be read or written (a dangling or looping symlink, a
symlink out of the package, an I/O error) is an ``error`` naming the path and the OS's
reason; a FIFO, device or socket is ``skipped`` with a note and never opened.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import errno
import functools
import hashlib
import io
import os
import stat
import tempfile
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import libcst as cst

from tern.errors import UsageError  # the run cannot start as asked; nothing has been written
from tern.engine import collection, support_module
from tern.engine.memo import TranslationMemo, package_digest
from tern.engine.package import PackageInfo, scan_package
from tern.engine.parallel import Workers
from tern.engine.report import FileResult, Note, RunReport
from tern.engine.translate import is_test_path, translate_module

SKIP_DIRS = {"__pycache__", ".git", ".tern", ".hg", ".svn", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
TMP_SUFFIX = ".tern-tmp"  # write_atomic's temporary files: ``.<name>.<random>.tern-tmp``


@dataclass(frozen=True)
class Job:
    rel: str
    source: Path
    package: PackageInfo | None  # None until the package is scanned (a pool worker fills in the facts it was sent)
    support_module: str = support_module.SUPPORT_MODULE  # how the file imports the package's support


@dataclass(frozen=True)
class Entry:
    """A path of the source tree, and what the run may do with it."""

    rel: str
    path: Path
    mode: int = 0o644  # the source's permission bits, given to the output
    link: bool = False  # a symlink to a file inside the package (translated as that file)
    refused: FileResult | None = None  # why it is not read at all


# ---------------------------------------------------------------------------- paths


def default_out(source: Path) -> Path:
    """``pkg`` -> ``pkg_jax/pkg``: a root to put on sys.path, the package name kept."""
    source = source.resolve()
    if source.is_file():
        return source.parent.parent / f"{source.parent.name}_jax" / source.parent.name / source.name
    return source.parent / f"{source.name}_jax" / source.name


def target_of(source: Path, out: Path | None, *, in_place: bool) -> Path:
    """Where the run writes (symlinks resolved)."""
    source = resolved(source, "the source")
    return source if in_place else (resolved(out, "--out") if out else default_out(source))


def resolved(path: Path, label: str) -> Path:
    """``path.resolve()``; a symlink loop on the way is a UsageError, not a RuntimeError."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:
        raise UsageError(f"{label} {path} cannot be resolved: a symlink loop ({exc})") from None


def check_target(source: Path, target: Path, *, in_place: bool, writing: bool = True) -> None:
    """Refuse an output that is, holds or lies in the source (unless in place), or cannot be
    written; raise UsageError before anything is written. Both paths are resolved."""
    if not in_place:
        if source.is_dir():
            how = ("is the source" if target == source else "is inside the source" if target.is_relative_to(source)
                   else "contains the source" if source.is_relative_to(target) else "")
        else:
            how = "is the source" if target == source else ""
        if how:
            raise UsageError(f"--out {target} {how} {source}: tern never writes into its source "
                             "(use --in-place to rewrite it)")
    if writing:
        check_writable(target if source.is_dir() else target.parent, f"the output {target}")
        if not source.is_dir() and target.is_dir():
            raise UsageError(f"--out {target} is a directory; for one file, --out names the output file")


def check_writable(directory: Path, label: str) -> None:
    """A directory that exists or can be made, and where files can be created; else UsageError
    saying that ``label`` (what the user named) cannot be written."""
    probe = directory
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    for part in (probe, *probe.parents):
        if part.exists() and not part.is_dir():
            raise UsageError(f"{label} cannot be written: {part} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        why = "read-only file system" if _read_only(probe) else "permission denied"
        raise UsageError(f"{label} cannot be written: {probe}: {why}")


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def reason(exc: OSError) -> str:
    """``Permission denied (EACCES)``: the OS's words and the errno name one can search for."""
    name = errno.errorcode.get(exc.errno or 0, "")
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text


# ---------------------------------------------------------------------------- the source tree


def list_files(source: Path) -> list[Entry]:
    """Every path of the tree below ``source`` (or that one file) in a stable order, each with
    what may be done with it; symlinked directories are listed (never followed), directories
    that cannot be listed reported."""
    root = source.resolve()
    if not root.is_dir():
        return [_entry(root, root.name, root.parent)]
    out: list[Entry] = []

    def unlistable(exc: OSError) -> None:
        path = Path(exc.filename)
        rel = path.relative_to(root).as_posix() if path != root else "."
        out.append(Entry(rel, path, refused=FileResult(rel, "error", error=f"cannot list this directory: {reason(exc)}")))

    for dirpath, dirnames, filenames in os.walk(root, onerror=unlistable):
        here = Path(dirpath)
        links = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".") and os.path.islink(here / d)]
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".") and d not in links)
        names = [n for n in filenames if not n.endswith((".pyc", ".pyo")) and not (n.startswith(".") and n.endswith(TMP_SUFFIX))]
        for name in sorted(names + links):  # a symlinked directory is never followed: reported as what it is
            out.append(_entry(here / name, (here / name).relative_to(root).as_posix(), root))
    return out


def _entry(path: Path, rel: str, root: Path) -> Entry:
    """Look before reading: lstat and stat only, nothing is opened here."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return Entry(rel, path, refused=FileResult(rel, "error", error=f"cannot be read: {reason(exc)}"))
    link = stat.S_ISLNK(info.st_mode)
    if link:
        target = "?"
        try:
            target = os.readlink(path)
            info = os.stat(path)
        except OSError as exc:
            what = "dangling symlink" if exc.errno == errno.ENOENT else "symlink"
            return Entry(rel, path, refused=FileResult(rel, "error", error=f"{what} to {target}: {reason(exc)}"))
        real = Path(os.path.realpath(path))
        if not real.is_relative_to(root):
            shown = target if Path(target) == real else f"{target} ({real})"
            return Entry(rel, path, refused=FileResult(
                rel, "error", error=f"symlink to {shown}, outside the package: not followed, not copied"))
        if stat.S_ISDIR(info.st_mode):
            return Entry(rel, path, refused=FileResult(rel, "skipped", notes=[Note(
                "symlink", f"to the directory {target}, inside the package: not followed (translated where it is)")]))
    if not stat.S_ISREG(info.st_mode):
        kind = _kind(info.st_mode)
        return Entry(rel, path, refused=FileResult(rel, "skipped", notes=[Note(
            kind, f"not a regular file{' (through a symlink)' if link else ''}: skipped, never opened")]))
    return Entry(rel, path, mode=stat.S_IMODE(info.st_mode) & 0o777, link=link)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISDIR, "directory")):
        if test(mode):
            return name
    return "special file"


def read_regular(path: Path) -> bytes:
    """The bytes of a regular file; OSError for anything else (opened non-blocking, so a
    FIFO that took a file's place cannot hang the run)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read()
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------- one file


def translate_file(job: Job, parsed: Parsed | None = None) -> tuple[FileResult, bytes | None]:
    """One file to its result and output bytes (None: nothing to write). Never raises for bad
    input. ``parsed``: the file parsed earlier (``parse_ahead``), used if its bytes are the same."""
    raw = _read(job)
    return raw if isinstance(raw, tuple) else translate_bytes(job, raw, parsed)


@dataclass(frozen=True)
class Parsed:
    raw: bytes
    module: cst.Module


def parse_ahead(job: Job) -> Parsed | None:
    """The file's syntax tree, for ``translate_file`` later; None for what it would not parse
    (not Python, unreadable, undecodable, a syntax error): it reports those itself."""
    if job.source.suffix != ".py":
        return None
    raw = _read(job)
    decoded = None if isinstance(raw, tuple) else _decode(job.rel, raw)
    if not isinstance(decoded, tuple):
        return None
    try:
        return Parsed(raw, cst.parse_module(decoded[0]))
    except (cst.ParserSyntaxError, RecursionError):
        return None


def _read(job: Job) -> bytes | tuple[FileResult, None]:
    try:
        return read_regular(job.source)
    except OSError as exc:
        return FileResult(job.rel, "error", error=f"cannot be read: {reason(exc)}"), None


def _translate_kept(job: Job, memo: TranslationMemo, package_key: str | None) -> tuple[FileResult, bytes | None]:
    """``translate_file`` through ``memo``: the file's bytes are read, the rest may be kept."""
    raw = _read(job)
    if isinstance(raw, tuple):
        return raw
    key = None if package_key is None else (job.rel, hashlib.sha256(raw).digest(), package_key, job.support_module)
    return memo.translate(key, lambda: translate_bytes(job, raw))


def translate_bytes(job: Job, raw: bytes, parsed: Parsed | None = None) -> tuple[FileResult, bytes | None]:
    """``translate_file`` of the file's bytes, already read."""
    if job.source.suffix != ".py":
        return FileResult(job.rel, "copied"), raw
    decoded = _decode(job.rel, raw)
    if isinstance(decoded, FileResult):
        return decoded, raw
    text, encoding = decoded
    with collection.one_file():
        return _translate_text(job, raw, text, encoding, parsed.module if parsed and parsed.raw == raw else None)


def _translate_text(job: Job, raw: bytes, text: str, encoding: str,
                    module: cst.Module | None = None) -> tuple[FileResult, bytes | None]:
    try:
        if module is None:
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
        return (FileResult(job.rel, "residue" if result.todos else "unchanged", edits=result.edits, todos=result.todos,
                           allowed=result.allowed, notes=result.notes, support=list(result.support)), raw)
    try:
        data = result.code.encode(encoding)
    except UnicodeEncodeError as exc:
        line = result.code[: exc.start].count("\n") + 1
        return FileResult(job.rel, "error", error_line=line, error=(
            f"the translation holds {result.code[exc.start]!r}, which the file's declared encoding ({encoding}) "
            "cannot hold; the file is copied unchanged")), raw
    diff = "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True), result.code.splitlines(keepends=True),
            fromfile=f"a/{job.rel}", tofile=f"b/{job.rel}",
        )
    )
    return (FileResult(job.rel, "residue" if result.todos else "translated", edits=result.edits, todos=result.todos,
                       allowed=result.allowed, notes=result.notes, diff=diff, support=list(result.support)),
            data)


def _decode(rel: str, raw: bytes) -> tuple[str, str] | FileResult:
    """Text and the encoding to write it back in, as Python reads the file (PEP 263: a UTF-8
    BOM, or a coding line, else UTF-8); or the error result."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as exc:
        if "invalid or missing" not in str(exc):  # an unknown encoding, or a BOM with another one declared
            line = next((i for i, ln in enumerate(raw.splitlines()[:2], 1) if b"coding" in ln), 1)
            return FileResult(rel, "error", error=f"bad encoding declaration: {exc.msg}", error_line=line)
        encoding = "utf-8"  # no declaration Python accepts: UTF-8, and say where it fails
    body = raw[3:] if encoding == "utf-8-sig" else raw
    try:
        return body.decode("utf-8" if encoding == "utf-8-sig" else encoding), encoding
    except (UnicodeDecodeError, LookupError) as exc:
        if not isinstance(exc, UnicodeDecodeError):
            return FileResult(rel, "error", error=f"bad encoding declaration: {exc}", error_line=1)
        at = exc.start + len(raw) - len(body)
        line = raw[:at].count(b"\n") + 1
        what = "not UTF-8" if encoding.startswith("utf-8") else f"not {encoding} as its coding line declares"
        return FileResult(rel, "error", error=f"{what} (byte {raw[at]:#04x} at offset {at})", error_line=line)


def _python_syntax_error(text: str, rel: str, exc: cst.ParserSyntaxError) -> tuple[int, str]:
    """Line and message as CPython reports them (LibCST's native parser can be a line off)."""
    try:
        compile(text, rel, "exec", dont_inherit=True)
    except SyntaxError as error:
        return error.lineno or exc.raw_line, f"{error.msg} (line {error.lineno}, column {error.offset})"
    except ValueError as error:  # NUL bytes
        return 1, str(error)
    return exc.raw_line, exc.message


# ---------------------------------------------------------------------------- writing


def write_atomic(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Write via a temporary file in the same directory and rename over the target.

    The result has ``mode`` when given, else the mode of the file it replaces, else what
    ``open`` would give a new file (0666 less the umask; never mkstemp's 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        current = os.stat(path)
    except FileNotFoundError:
        current = None
    if current is not None and stat.S_ISREG(current.st_mode) and current.st_size == len(data) and read_regular(path) == data:
        if mode is not None and stat.S_IMODE(current.st_mode) != mode:
            os.chmod(path, mode)
        return
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        if mode is None:
            mode = stat.S_IMODE(current.st_mode) if current is not None and stat.S_ISREG(current.st_mode) else 0o666 & ~_umask()
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_UMASK: int | None = None


def _umask() -> int:
    global _UMASK
    if _UMASK is None:
        try:  # Linux says it without changing it (os.umask can only set it, for the whole process)
            status = Path("/proc/self/status").read_text()
            _UMASK = int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("Umask:")), 8)
        except (OSError, StopIteration, ValueError, IndexError):
            _UMASK = os.umask(0o022)
            os.umask(_UMASK)
    return _UMASK


def remove_stale_temps(root: Path) -> None:
    """Temporary files a killed run left (``.<name>.*.tern-tmp``, regular files only)."""
    if not root.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")]  # never written to
        for name in filenames:
            path = Path(dirpath) / name
            if name.startswith(".") and name.endswith(TMP_SUFFIX):
                try:
                    if stat.S_ISREG(os.lstat(path).st_mode):
                        path.unlink()
                except OSError:
                    pass  # gone already, or not ours to remove: it is no output of this run either


def remove_stale_temps_of(path: Path) -> None:
    """The temporary files a killed write of ``path`` left beside it."""
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        if name.startswith(f".{path.name}.") and name.endswith(TMP_SUFFIX):
            try:
                (path.parent / name).unlink()
            except OSError:
                pass


def _write(dest: Path, data: bytes, mode: int | None, *, source: Path | None = None) -> str:
    """Write one output file; the reason it could not be written, or ''. With ``source``,
    never a path that a symlink in the output tree leads into the source."""
    if source is not None:
        lands = Path(os.path.realpath(dest.parent)) / dest.name
        if lands == source or (source.is_dir() and lands.is_relative_to(source)):
            return f"cannot write {dest}: a symlink in the output leads into the source ({lands})"
    try:
        write_atomic(dest, data, mode=mode)
    except OSError as exc:
        where = Path(exc.filename) if exc.filename else dest
        if isinstance(exc, FileExistsError) or exc.errno == errno.ENOTDIR:
            blocker = next((p for p in (where, *where.parents) if p.exists() and not p.is_dir()), where)
            return f"cannot write {dest}: {blocker} is in the way (a file, not a directory)"
        return f"cannot write {dest}: {reason(exc)}"
    return ""


# ---------------------------------------------------------------------------- the run


def migrate(
    source: Path,
    out: Path | None = None,
    *,
    in_place: bool = False,
    dry_run: bool = False,
    jobs: int = 1,
    progress: Callable[[Iterable, int], Iterable] | None = None,
    memo: TranslationMemo | None = None,
) -> RunReport:
    """Translate ``source`` into ``out`` (see the module's docstring). ``memo``: translations a
    long-lived caller keeps between runs (the daemon); a file whose bytes and package facts
    are unchanged is not translated again. Used when the files are translated in this process
    (``jobs=1``, or one file)."""
    source = resolved(source, "the source")
    if not source.exists():
        raise FileNotFoundError(source)
    target = target_of(source, out, in_place=in_place)
    check_target(source, target, in_place=in_place, writing=not dry_run)
    single = not source.is_dir()
    root = source.parent if single else source
    # the support module an earlier run generated (a rerun on tern's output) is written anew
    with collection.one_file():  # a long-lived caller's heap (the daemon's) is not walked for a listing
        entries = [e for e in list_files(source) if not support_module.is_generated(e.path)]
    if any(e.path.parent == root and e.path.name == support_module.FILE_NAME for e in entries):
        raise ValueError(f"{root / support_module.FILE_NAME} is the name of the support module tern generates "
                         "in every translated package; rename that file first")
    if not dry_run and single:
        remove_stale_temps_of(target)
    elif not dry_run:
        remove_stale_temps(target)
    readable = [e for e in entries if e.refused is None]
    imports_from = support_module.import_name(root)
    work = [Job(e.rel, e.path, None, imports_from) for e in readable]
    # with -j N the workers start now: they parse files while this process scans the package
    with (Workers(work, jobs, translate=translate_file, parse=parse_ahead) if jobs > 1 and len(work) > 1
          else contextlib.nullcontext()) as workers:
        with collection.one_file():  # the pre-pass' trees stay alive: a collection would walk them again and again
            package = scan_package(root, [e.path for e in readable if e.path.suffix == ".py"])
        with collection.settled():
            translated = (workers.results(package, progress) if workers is not None
                          else _translate_here(work, package, progress, memo))
    with collection.settled():
        return _write_all(source, target, root, entries, translated, single=single, in_place=in_place,
                          dry_run=dry_run)


def _translate_here(work: list[Job], package: PackageInfo, progress, memo: TranslationMemo | None) -> list:
    """Every job translated in this process, through ``memo`` if there is one."""
    one = translate_file
    if memo is not None:
        one = functools.partial(_translate_kept, memo=memo, package_key=package_digest(package))
    work = [dataclasses.replace(job, package=package) for job in work]
    return [one(job) for job in (progress(work, len(work)) if progress else work)]


def _write_all(source: Path, target: Path, root: Path, entries: list, translated: list, *,
               single: bool, in_place: bool, dry_run: bool) -> RunReport:
    """``migrate`` once every file is translated: write, report."""
    translated = iter(translated)
    report = RunReport(str(source), str(target))
    for entry in entries:
        result, data = (entry.refused, None) if entry.refused is not None else next(translated)
        report.files.append(result)
        if dry_run or data is None:
            continue
        if in_place and (entry.link or result.status in ("copied", "unchanged", "error")):
            continue  # a link inside the package: its target is translated where it is
        dest = target if single else target / entry.rel
        failure = _write(dest, data, None if in_place else entry.mode, source=None if in_place else source)
        if failure:
            report.files[-1] = FileResult(entry.rel, "error", error=failure)
    _write_support(report, target.parent if single else target, dry_run, None if in_place else source)
    return report


def _write_support(report: RunReport, out_root: Path, dry_run: bool, source: Path | None) -> None:
    """The package's support module: exactly what its files import, and what that uses; none
    when nothing does (a module an earlier run left is removed)."""
    wanted = sorted({name for f in report.files for name in f.support})
    path = out_root / support_module.FILE_NAME
    if wanted:
        report.support_module = support_module.FILE_NAME
        report.support = support_module.closure(wanted)
        if not dry_run:
            failure = _write(path, support_module.module_text(wanted).encode("utf-8"), None, source=source)
            if failure:
                report.files.append(FileResult(support_module.FILE_NAME, "error", error=failure))
    elif not dry_run and support_module.is_generated(path):
        try:
            path.unlink()
        except OSError as exc:
            report.files.append(FileResult(support_module.FILE_NAME, "error",
                                           error=f"cannot remove the stale {path}: {reason(exc)}"))
