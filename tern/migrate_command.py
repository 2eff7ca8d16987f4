"""``tern migrate``'s rules pass and what it prints, for the CLI and for the daemon.

Why one function for both: the thin client (``tern/thin.py``) sends a plain rules-only
``tern migrate`` to the project's daemon, which keeps the rule tables loaded and the
translations of unchanged files (``TranslationMemo``), and its answer must be the CLI's,
byte for byte. What follows the rules (the LLM fallback, ``--verify``) stays in the CLI.

Paths a user gives are read against ``cwd``, not the process's own directory: the daemon
serves clients from anywhere.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional

from rich.console import Console
from rich.table import Table

from tern.engine.report import RunReport


@dataclass(frozen=True)
class MigrateArgs:
    path: Path
    out_dir: Optional[Path] = None
    in_place: bool = False
    dry_run: bool = False
    jobs: int = 1
    report_path: Optional[Path] = None
    quiet: bool = False
    llm: Optional[bool] = None
    overrides: dict[str, Any] = field(default_factory=dict)

    def anchored(self, cwd: Path) -> MigrateArgs:
        """The source and output read against ``cwd`` (absolute ones stand); ``report_path``
        stays as given, since the report is named as the user wrote it (``report_stem``)."""
        def at(p: Optional[Path]) -> Optional[Path]:
            return None if p is None else cwd / p
        return MigrateArgs(cwd / self.path, at(self.out_dir), self.in_place, self.dry_run, self.jobs, self.report_path,
                           self.quiet, self.llm, dict(self.overrides))


@dataclass
class RulesPassed:
    """The rules pass is done and printed: what the CLI needs to go on (LLM, ``--verify``)."""

    report: RunReport
    stem: str
    llm_config: Any
    rules_seconds: float


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that the run unwinds as on Ctrl-C: the pool's
    workers are terminated, nothing half-written is left (exit 143)."""


@contextlib.contextmanager
def terminate_as_interrupt():
    def terminated(signum, frame):
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread (an embedding program, the daemon): its signals are its own
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def summary(report: RunReport) -> Table:
    table = Table(title=f"tern migrate: {report.source}", show_lines=False)
    table.add_column("file")
    table.add_column("status")
    table.add_column("edits", justify="right")
    table.add_column("TODOs", justify="right")
    kept = any(f.allowed for f in report.files)
    if kept:
        table.add_column("allowed TF", justify="right")  # tf.data kept on purpose: not residue
    styles = {"translated": "green", "residue": "yellow", "error": "red", "unchanged": "dim", "copied": "dim", "skipped": "dim"}
    for f in report.files:
        row = [f.path, f"[{styles[f.status]}]{f.status}[/]", str(len(f.edits)), str(len(f.todos))]
        table.add_row(*row, *([str(len(f.allowed))] if kept else []))
    return table


def report_stem(args: MigrateArgs, cwd: Path) -> str:
    """The report's path stem as the user will read it, checked before anything is written:
    the output and the report are never inside the source (unless --in-place), and can be
    written. UsageError (or FileNotFoundError, left to the run to report) otherwise."""
    from tern.engine.runner import check_target, check_writable, resolved, target_of
    from tern.errors import UsageError

    source = resolved(args.path, "the source")
    if not source.exists():
        return ""
    target = target_of(source, args.out_dir, in_place=args.in_place)
    check_target(source, target, in_place=args.in_place, writing=not args.dry_run)
    report_path = args.report_path
    stem = resolved(cwd / report_path, "--report") if report_path else target.with_name(target.name + ".tern-report")
    if source.is_dir() and stem.is_relative_to(source):
        raise UsageError(f"--report {stem} is inside the source {source}: tern never writes reports into its source")
    if source in (stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".md")):
        raise UsageError(f"--report {stem} would overwrite the source {source}")
    if not args.dry_run:
        check_writable(stem.parent, f"--report {stem}" if report_path else f"the report {stem}.json")
    return str(report_path or stem)


def write_reports(report: RunReport, stem: Path) -> str:
    """Both reports, or the one-line reason they could not be written."""
    from tern.engine.runner import reason, remove_stale_temps_of, write_atomic

    for suffix, text in ((".json", report.to_json()), (".md", report.to_markdown())):
        path = Path(f"{stem}{suffix}")
        remove_stale_temps_of(path)
        try:
            write_atomic(path, text.encode())
        except OSError as exc:
            return f"cannot write the report {path}: {reason(exc)}"
    return ""


def choose_llm(args: MigrateArgs, cwd: Path, env: Mapping[str, str] | None = None):
    """``(LLM config or None, the rules-only line)``; raises the agent's usage errors and ConfigError."""
    from tern.agent import cli as agent_cli

    return agent_cli.choose(args.path, llm=args.llm, in_place=args.in_place, dry_run=args.dry_run,
                            overrides=args.overrides, project=cwd, env=env)


def migrate_rules(args: MigrateArgs, *, out: Console, err: Console, cwd: Path, env: Mapping[str, str] | None = None,
                  memo: Any = None, progress: Callable[[Iterable, int], Iterable] | None = None) -> RulesPassed | int:
    """The rules pass of ``tern migrate`` with its output: the run's facts, or the exit code
    when it ends here (2: bad usage or the run could not be made; 130/143: interrupted).
    ``args`` holds the paths as given; ``cwd`` is where they are read from."""
    from tern.agent import cli as agent_cli
    from tern.engine.runner import migrate as run
    from tern.errors import UsageError
    from tern.verify.config import ConfigError

    shown = args
    args = args.anchored(cwd)
    if args.in_place and args.out_dir is not None:
        err.file.write("error: --in-place and --out exclude each other\n")
        return 2
    try:
        stem = report_stem(args, cwd)
    except UsageError as exc:
        err.file.write(f"error: {exc}\n")
        return 2
    try:
        llm_config, rules_only = choose_llm(args, cwd, env)
    except (agent_cli.AgentUsageError, ConfigError) as exc:
        err.file.write(f"error: {exc}\n")
        return 2
    started = time.perf_counter()
    try:
        with terminate_as_interrupt():
            report = run(args.path, args.out_dir, in_place=args.in_place, dry_run=args.dry_run, jobs=args.jobs,
                         progress=progress, memo=memo)
    except FileNotFoundError as exc:
        err.file.write(f"error: no such file or directory: {exc}\n")
        return 2
    except ValueError as exc:  # UsageError (the output would harm the source, or cannot be written), or the
        err.file.write(f"error: {exc}\n")  # source holds a file named as tern's generated support module
        return 2
    except OSError as exc:  # not one file's fault (each of those is in the report): the run could not be made
        from tern.engine.runner import reason

        err.file.write(f"error: {exc.filename or shown.path}: {reason(exc)}\n")
        return 2
    except KeyboardInterrupt as exc:
        err.file.write("interrupted: no report written; files already written are complete (each write is atomic); "
                       "rerun to finish\n")
        return 143 if isinstance(exc, Terminated) else 130
    rules_seconds = time.perf_counter() - started
    failure = ""
    if args.dry_run:
        for f in report.files:
            if f.diff:
                out.file.write(f.diff)
        if report.support_module:  # generated, not a diff of the user's code: named, not printed
            err.file.write(f"would write {report.support_module} (generated support: {', '.join(report.support)})\n")
    else:
        failure = write_reports(report, cwd / stem)
    source = Path(report.source)
    for f in report.files:
        where = source / f.path if source.is_dir() else source
        if f.status == "error":  # one plain line each: tools parse them
            err.file.write(f"error: {where}:{f.error_line}: {f.error}\n" if f.error_line else f"error: {where}: {f.error}\n")
        elif f.status == "skipped":
            err.file.write("".join(f"note: {where}: {n.construct}: {n.text}\n" for n in f.notes))
    if failure:
        err.file.write(f"error: {failure}\n")
        return 2
    if not args.quiet:
        console = err if args.dry_run else out
        console.print(summary(report))
        t = report.totals()
        console.print(
            f"{t['translated']} translated, {t['residue']} with residue, "
            + (f"{t['skipped']} skipped, " if t["skipped"] else "")
            + f"{t['errors']} errors; "
            f"{t['edits']} edits, {t['todos']} TODOs"
            + (f", {t['allowed_tf']} allowed TF uses (tf.data input pipelines, not residue)" if t["allowed_tf"] else "")
            + ("" if args.dry_run else f"; output in {report.out}; report {stem}.md")
            + (f"; support code in {report.support_module} ({len(report.support)} definitions)" if report.support_module else ""),
            markup=False,
        )
    if rules_only and not args.quiet:
        err.print(rules_only, markup=False, highlight=False)  # it names [tool.tern.llm]
    return RulesPassed(report, stem, llm_config, rules_seconds)


# ---------------------------------------------------------------------------- in the daemon

#: translations the daemon keeps between requests (created on the first)
_MEMO: Any = None
#: one migrate at a time: the engine's lazily built tables are not shared between threads
_ONE_AT_A_TIME = threading.Lock()


def args_of(data: dict[str, Any]) -> MigrateArgs:
    """The thin client's ``args`` (``tern/thin.py``'s ``parse_migrate``); ValueError when malformed."""
    def text(name: str) -> Optional[str]:
        value = data.get(name)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"migrate argument {name!r} must be a string")
        return value

    path, out_dir, report = text("path"), text("out"), text("report")
    if path is None:
        raise ValueError("migrate needs a path")
    flags = {name: data.get(name, False) for name in ("in_place", "dry_run", "quiet", "no_llm")}
    if not all(isinstance(v, bool) for v in flags.values()):
        raise ValueError("migrate flags must be booleans")
    return MigrateArgs(Path(path), Path(out_dir) if out_dir is not None else None, flags["in_place"], flags["dry_run"],
                       1, Path(report) if report is not None else None, flags["quiet"], False if flags["no_llm"] else None)


async def answer_migrate(request: dict[str, Any], sandbox: Any, emit: Callable[[str], None]) -> dict[str, Any]:
    """``{"stdout", "stderr", "exit"}`` for a thin client's rules-only ``tern migrate``, or
    ``{"fallback": why}`` when the CLI must run it (an LLM is configured, or its settings are
    wrong: the CLI says how). Runs in a thread, so the daemon's event loop goes on serving
    jobs; a client that hangs up stops it before the next file (what is written stays
    complete: every write is atomic)."""
    import anyio.to_thread

    cancelled = threading.Event()
    try:
        return await anyio.to_thread.run_sync(_answer_migrate, request, cancelled, abandon_on_cancel=True)
    finally:
        cancelled.set()


def _answer_migrate(request: dict[str, Any], cancelled: threading.Event) -> dict[str, Any]:
    global _MEMO
    from tern.engine.memo import TranslationMemo
    from tern.verify.served import client_console

    args, cwd = args_of(request.get("args") or {}), Path(request["cwd"])
    env = {k: v for k, v in (request.get("env") or {}).items() if isinstance(k, str) and isinstance(v, str)}
    try:
        config, _ = choose_llm(args.anchored(cwd), cwd, env)
    except Exception as exc:  # a usage or settings error: the CLI reports it, as it always has
        return {"fallback": f"the LLM settings need the CLI: {exc}"}
    if config is not None:
        return {"fallback": "an LLM is configured: the CLI runs the fallback"}
    out, out_buffer = client_console(request.get("console", {}), "stdout")
    err, err_buffer = client_console(request.get("console", {}), "stderr")

    def progress(items: Iterable, total: int) -> Iterable:
        for item in items:
            if cancelled.is_set():
                raise KeyboardInterrupt
            yield item

    with _ONE_AT_A_TIME:
        if cancelled.is_set():
            return {"stdout": "", "stderr": "", "exit": 130}
        if _MEMO is None:
            _MEMO = TranslationMemo()
        ran = migrate_rules(args, out=out, err=err, cwd=cwd, env=env, memo=_MEMO, progress=progress)
    return {"stdout": out_buffer.take(), "stderr": err_buffer.take(),
            "exit": ran if isinstance(ran, int) else ran.report.exit_code}
