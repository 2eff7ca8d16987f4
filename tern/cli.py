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
) -> None:
    """Translate PATH with the deterministic rules. Exit 0: all translated, 1: residue, 2: errors."""
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
    raise typer.Exit(report.exit_code)
