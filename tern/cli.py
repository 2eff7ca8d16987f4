"""The ``tern`` command line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tern.report import RunReport

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Migrate TensorFlow/Keras code and its tests to JAX/Flax.")
err = Console(stderr=True)
out = Console()


@app.callback()
def main() -> None:
    """Tern: TensorFlow to JAX/Flax, rules first, honest about the rest."""


def _progress(console: Console):
    def wrap(items, total):
        if total < 8 or not console.is_terminal:
            yield from items
            return
        with Progress(
            TextColumn("[bold]translating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=True,
        ) as bar:
            task = bar.add_task("files", total=total)
            for item in items:
                yield item
                bar.advance(task)

    return wrap


def _summary(report: RunReport) -> Table:
    table = Table(title=f"tern migrate: {report.source}", show_lines=False)
    table.add_column("file")
    table.add_column("status")
    table.add_column("edits", justify="right")
    table.add_column("TODOs", justify="right")
    styles = {"translated": "green", "residue": "yellow", "error": "red", "unchanged": "dim", "copied": "dim"}
    for f in report.files:
        table.add_row(f.path, f"[{styles[f.status]}]{f.status}[/]", str(len(f.edits)), str(len(f.todos)))
    return table


@app.command()
def migrate(
    path: Path = typer.Argument(..., help="A TF package directory or a single file."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Directory receiving the translated tree (default: PATH_jax/NAME beside PATH)."),
    in_place: bool = typer.Option(False, "--in-place", help="Rewrite the source tree itself."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print a unified diff; write nothing."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Files translated in parallel processes."),
    report_path: Optional[Path] = typer.Option(None, "--report", help="Report path stem (writes .json and .md); default: beside the output."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary table."),
    then_verify: bool = typer.Option(False, "--verify", help="Then run tern verify on the output."),
) -> None:
    """Translate PATH with the deterministic rules. Exit 0: all translated, 1: residue, 2: errors
    (with --verify, 1 also when verification finds a mismatch or an error)."""
    from tern.runner import migrate as run

    if in_place and out_dir is not None:
        sys.stderr.write("error: --in-place and --out exclude each other\n")
        raise typer.Exit(2)
    try:
        report = run(path, out_dir, in_place=in_place, dry_run=dry_run, jobs=jobs, progress=_progress(err))
    except FileNotFoundError as exc:
        sys.stderr.write(f"error: no such file or directory: {exc}\n")
        raise typer.Exit(2)
    if dry_run:
        for f in report.files:
            if f.diff:
                sys.stdout.write(f.diff)
    else:
        stem = str(report_path or Path(report.out).with_name(Path(report.out).name + ".tern-report"))
        from tern.runner import write_atomic

        write_atomic(Path(stem + ".json"), report.to_json().encode())
        write_atomic(Path(stem + ".md"), report.to_markdown().encode())
    source = Path(report.source)
    for f in report.files:
        if f.status == "error":
            where = source / f.path if source.is_dir() else source
            sys.stderr.write(f"error: {where}:{f.error_line}: {f.error}\n")  # one plain line: tools parse it
    if not quiet:
        console = err if dry_run else out
        console.print(_summary(report))
        t = report.totals()
        console.print(
            f"{t['translated']} translated, {t['residue']} with residue, {t['errors']} errors; "
            f"{t['edits']} edits, {t['todos']} TODOs"
            + ("" if dry_run else f"; output in {report.out}; report {stem}.md")
        )
    if then_verify and not dry_run and Path(report.out).is_dir():
        from tern.verify.cli import Target

        code = _verify([Target(Path(report.source).resolve(), Path(report.out).resolve())], project=Path.cwd(),
                       daemon="auto", use_cache=True, workers=None, json_path=None)
        raise typer.Exit(max(report.exit_code, code) if report.exit_code != 2 else 2)
    raise typer.Exit(report.exit_code)


@app.command()
def serve(
    project: Optional[Path] = typer.Option(None, "--project", help="Any path inside the project (default: the current directory)."),
    idle: float = typer.Option(900.0, "--idle", min=0.0, help="Exit after this many seconds without requests."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Workers per kind (default: the Sandbox's choice)."),
    writable: list[Path] = typer.Option([], "--writable", help="A directory jobs may write under (repeatable)."),
    stop: bool = typer.Option(False, "--stop", help="Stop the project's server and its workers."),
    status: bool = typer.Option(False, "--status", help="Print the project's server status."),
) -> None:
    """Keep the project's sandbox workers warm behind a local socket, in the foreground.

    Clients start one on demand; run it yourself to watch its log. Exit 1: none to report
    (--status) or one runs already.
    """
    import asyncio

    from tern.sandbox import client, server
    from tern.sandbox.daemon import paths_for

    if stop and status:
        sys.stderr.write("error: --stop and --status exclude each other\n")
        raise typer.Exit(2)
    if project is not None and not project.is_dir():
        sys.stderr.write(f"error: no such directory: {project}\n")
        raise typer.Exit(2)
    paths = paths_for(project or Path.cwd())
    try:
        if status:
            info = asyncio.run(client.daemon_status(paths))
            sys.stdout.write(client.describe(info) if info else f"no tern server for {paths.project}\n")
            raise typer.Exit(0 if info else 1)
        if stop:
            pid = asyncio.run(client.stop_daemon(paths))
            sys.stdout.write(f"stopped tern server {pid}\n" if pid else f"no tern server for {paths.project}\n")
            return
    except client.DaemonUnavailable as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(1)
    raise typer.Exit(server.main(paths.project, idle=idle, workers=workers, writable_roots=tuple(writable)))


def _verify(targets, *, project: Path, daemon: str, use_cache: bool, workers: Optional[int], json_path: Optional[Path]) -> int:
    import anyio

    from tern.runner import write_atomic
    from tern.verify import cli as verify_cli

    def progress(message: str) -> None:
        if err.is_terminal:
            err.print(f"[dim]{message}[/]")

    reports, info = anyio.run(lambda: verify_cli.verify_targets(
        targets, project=project, daemon=daemon, use_cache=use_cache, workers=workers, progress=progress))
    verify_cli.render(reports, info, out)
    first = targets[0].translated
    where = first if len(targets) == 1 else first.parent
    path = json_path or where.with_name(where.name + ".tern-verify.json")
    write_atomic(path, verify_cli.json_report(reports, info).encode())
    out.print(f"report {path}")
    return verify_cli.exit_code(reports)


@app.command()
def verify(
    path: Path = typer.Argument(..., help="A translated package (from tern migrate), or a directory of them."),
    original: Optional[Path] = typer.Option(None, "--original", help="The TF package PATH was translated from (default: from the migrate report)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Where to write the JSON report (default: beside PATH)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Run every job again; do not read cached results."),
    daemon: str = typer.Option("auto", "--daemon", help="auto: use or start the project's tern server; never: workers of this process; require."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Workers per kind for a sandbox started here."),
    project: Optional[Path] = typer.Option(None, "--project", help="Project whose .tern/ holds the cache (default: the current directory's)."),
) -> None:
    """Compare a translation with its TF original: replayed layer calls and translated tests.

    Exit 0: nothing differs (untested modules are listed); 1: a mismatch or an error; 2: bad usage.
    """
    from tern.verify.cli import TargetError, find_targets
    from tern.verify.config import ConfigError

    try:
        targets = find_targets(path, original)
        code = _verify(targets, project=project or Path.cwd(), daemon=daemon, use_cache=not no_cache, workers=workers, json_path=json_path)
    except (TargetError, ConfigError, ValueError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(2)
    raise typer.Exit(code)


cache_app = typer.Typer(help="The verification cache under .tern/.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


@cache_app.command("clear")
def cache_clear(project: Optional[Path] = typer.Option(None, "--project", help="Project whose .tern/ to clear (default: the current directory's).")) -> None:
    """Delete cached results, recordings and the JAX compilation cache."""
    from tern.sandbox.daemon import find_project
    from tern.verify.cache import Cache

    state = find_project(project or Path.cwd()) / ".tern"
    cache = Cache(state)
    count = cache.clear()
    cache.close()
    out.print(f"cleared {count} cached results from {state}")


@app.command()
def weights(
    source: Path = typer.Argument(..., help="A .keras or .h5 file, a TF checkpoint (prefix or directory) or a SavedModel directory."),
    original: Path = typer.Option(..., "--original", help="The TF package the model comes from."),
    translated: Path = typer.Option(..., "--translated", help="Its Flax translation (from tern migrate)."),
    out_dir: Path = typer.Option(..., "--out", "-o", help="Directory receiving checkpoint/ and tern-weights.json."),
    model: Optional[str] = typer.Option(None, "--model", help="pkg.module:Name, a class or a function building the model (optional for .keras)."),
    args: Optional[str] = typer.Option(None, "--args", help="Its positional arguments, a JSON list."),
    kwargs: Optional[str] = typer.Option(None, "--kwargs", help="Its keyword arguments, a JSON object."),
    input_shape: list[str] = typer.Option([], "--input-shape", help="An input's shape with batch, e.g. 2,12 (repeatable; default: the model's own)."),
    input_dtype: list[str] = typer.Option([], "--input-dtype", help="An input's dtype (repeatable; default float32)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="keras, h5, checkpoint or savedmodel (default: from SOURCE)."),
    rtol: Optional[float] = typer.Option(None, "--rtol", help="Relative tolerance of the replay (default: [tool.tern.verify], else 1e-5)."),
    atol: Optional[float] = typer.Option(None, "--atol", help="Absolute tolerance of the replay (default: [tool.tern.verify], else 1e-5)."),
    project: Optional[Path] = typer.Option(None, "--project", help="Project whose .tern/ and server to use (default: the current directory's)."),
    daemon: str = typer.Option("auto", "--daemon", help="auto: use or start the project's tern server; never: workers of this process; require."),
) -> None:
    """Convert a TF model's weights into the Flax variables of its translation, saved with orbax,
    and check them by replaying seeded inputs.

    Exit 0: the Flax outputs match Keras's; 1: a mismatch or weights that do not fit; 2: bad usage.
    """
    import anyio

    from tern.sandbox.client import DaemonUnavailable, resolve_mode
    from tern.verify import weights_cmd

    try:
        daemon = resolve_mode(daemon)
        if project is not None and not project.is_dir():
            raise weights_cmd.UsageError(f"--project {project}: no such directory")
        request = weights_cmd.make_request(source, original=original, translated=translated, out=out_dir, model=model,
                                           fmt=fmt, args=args, kwargs=kwargs, shapes=tuple(input_shape),
                                           dtypes=tuple(input_dtype), rtol=rtol, atol=atol)
    except ValueError as exc:  # UsageError, or an unknown --daemon mode
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(2)
    try:
        report = anyio.run(lambda: weights_cmd.run(request, project=project or Path.cwd(), daemon=daemon))
    except DaemonUnavailable as exc:  # --daemon require, and none could be had
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(2)
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback (OSError: a file we could not write)
        sys.stderr.write(f"error: {type(exc).__name__}: {exc}\n")
        raise typer.Exit(1)
    if report["status"] != "usage":
        sys.stdout.write("".join(line + "\n" for line in weights_cmd.summary(report, request.out)))
    if report.get("message"):
        sys.stderr.write(f"error: {report['message']}\n")
    raise typer.Exit(weights_cmd.exit_code(report))
