"""``tern eval``: run suites and write the scorecard, or compare two saved runs.

Exit status: 0 the run finished with no regression against ``--baseline`` and no case
worse than its suite's ``expect``; 1 a regression, or a case worse than expected
(``--compare``: the second run regresses against the first); 2 bad usage (a suite that
does not exist or does not parse, a baseline that is not a tern eval JSON, bad options).
A failed or unverified case alone does not make the exit non-zero: it lowers the score,
and a suite states what it expects of a case with ``expect``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from tern.errors import UsageError
from tern.evaluation import html, render
from tern.evaluation import report as eval_report
from tern.evaluation.compare import compare
from tern.evaluation.score import CaseResult
from tern.status import Grade


class BarProgress:
    """A bar with the latest event, and a line per finished case (terminals)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bar: Progress | None = None
        self.task: Any = None

    def start(self, total: int) -> None:
        self.bar = Progress(TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("{task.description}"), console=self.console, transient=True)
        self.bar.start()
        self.task = self.bar.add_task("", total=total)

    def update(self, case: str, message: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, description=f"{case}: {message}"[:80])

    def done(self, result: CaseResult) -> None:
        if self.bar is None:
            return
        grade = Grade.get(result.status)
        style = grade.style if grade else ""
        self.bar.console.print(f"{escape(result.id)}: [{style}]{result.status}[/]" + (" (cached)" if result.cached else ""))
        self.bar.advance(self.task)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


class LineProgress:
    """One plain line per finished case (logs, CI)."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.total, self.count = stream, 0, 0

    def start(self, total: int) -> None:
        self.total = total

    def update(self, case: str, message: str) -> None:
        pass

    def done(self, result: CaseResult) -> None:
        self.count += 1
        self.stream.write(f"[{self.count}/{self.total}] {result.id}: {result.status}"
                          + (" (cached)" if result.cached else "") + "\n")
        self.stream.flush()

    def stop(self) -> None:
        pass


def _write(path: Path, text: str) -> None:
    from tern.engine.runner import write_atomic

    write_atomic(path, text.encode("utf-8"))


def run_suites(paths: list[Path], *, out_dir: Path | None, baseline: Path | None, json_path: Path | None,
               markdown_path: Path | None, html_path: Path | None, use_cache: bool, jobs: int, llm: bool | None,
               daemon: str, workers: int | None, project: Path | None, out: Console, err: Console,
               executor: Any = None) -> int:
    from tern.evaluation import llm as llm_seam
    from tern.evaluation.run import Options, evaluate
    from tern.evaluation.suite import SuiteError, load_suites
    from tern.sandbox.daemon import resolve_mode
    from tern.sandbox.daemon import find_project
    from tern.verify.config import ConfigError

    started, clock = eval_report.now(), time.perf_counter()
    if not paths:
        raise UsageError("give at least one suite: a directory of TF packages or a suite .toml")
    if project is not None and not project.is_dir():
        raise UsageError(f"--project {project}: no such directory")
    root = find_project(project or Path.cwd())
    try:
        suites = load_suites(paths)
        base = eval_report.load(baseline) if baseline is not None else None
        setup = llm_seam.setup(root, llm)
        mode = resolve_mode(daemon)
    except (SuiteError, eval_report.EvalFileError, ConfigError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    name = "+".join(s.name for s in suites)
    run_dir = (out_dir or root / ".tern" / "eval" / name).resolve()
    err.print(setup.line, markup=False, highlight=False)
    options = Options(project=root, run_dir=run_dir, llm=setup, use_cache=use_cache, jobs=jobs, daemon=mode,
                      workers=workers, executor=executor)
    progress = BarProgress(err) if err.is_terminal else LineProgress(sys.stderr)
    try:
        outcome = evaluate(suites, options, progress)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    finally:
        progress.stop()
    option_values = {"mode": setup.mode, "mode_line": setup.line, "llm": setup.key() or None, "cache": use_cache,
                     "jobs": jobs, "daemon": mode, "workers": workers,
                     "executor": executor.kind if executor is not None else "local", "suites": [str(p) for p in paths],
                     "run_dir": str(run_dir), "baseline": str(baseline) if baseline else None}
    result = eval_report.build(suites, outcome.results, options=option_values, run=outcome.info, project=root,
                               started=started, seconds=time.perf_counter() - clock)
    if base is not None:
        result["comparison"] = compare(base, result)
    written = {
        "json": json_path or run_dir / "eval.json",
        "markdown": markdown_path or run_dir / "eval.md",
        "html": html_path or run_dir / "eval.html",
    }
    _write(written["json"], eval_report.dumps(result))
    _write(written["markdown"], render.markdown(result))
    _write(written["html"], html.run_page(result))
    render.scorecard(result, out)
    if base is not None:
        out.print(f"against the baseline {baseline}:")
        render.diff(result["comparison"], out)
    out.print(f"reports: {written['json']}, {written['markdown']}, {written['html']}", markup=False, highlight=False)
    regressed = bool(result.get("comparison", {}).get("regressions"))
    return 1 if regressed or result["summary"]["worse_than_expected"] else 0


def compare_runs(paths: list[Path], *, json_path: Path | None, markdown_path: Path | None, html_path: Path | None,
                 out: Console) -> int:
    if len(paths) != 2:
        raise UsageError(f"--compare takes two eval JSON files (baseline, run), not {len(paths)}")
    try:
        before, after = (eval_report.load(p) for p in paths)
    except eval_report.EvalFileError as exc:
        raise UsageError(str(exc)) from None
    comparison = compare(before, after)
    out.print(f"{paths[0]} -> {paths[1]}", markup=False, highlight=False)
    render.diff(comparison, out)
    if json_path:
        _write(json_path, json.dumps(comparison, indent=1) + "\n")
    if markdown_path:
        _write(markdown_path, "\n".join(render.diff_markdown(comparison)) + "\n")
    if html_path:
        _write(html_path, html.compare_page(comparison, before, after))
    return 1 if comparison["regressions"] else 0
