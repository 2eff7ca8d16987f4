"""``tern verify``: find what to compare, run it through the sandbox, show and save it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

from tern.sandbox.isolation import warning as isolation_warning
from tern.status import Status
from tern.verify.report import PackageReport, problem_lines, to_json
from tern.verify.step_report import session_lines

class TargetError(ValueError):
    """PATH does not name a translation tern can pair with its original."""


@dataclass(frozen=True)
class Target:
    original: Path
    translated: Path


def _report_source(translated: Path) -> Path | None:
    report = translated.with_name(translated.name + ".tern-report.json")
    if not report.is_file():
        return None
    from tern.engine.report import ReportError, read_report

    try:
        return Path(read_report(report)["source"])
    except ReportError as exc:
        raise TargetError(str(exc)) from None


def find_targets(path: Path, original: Path | None) -> list[Target]:
    """PATH is a translated package (its original from ``--original`` or from the
    migrate report beside it), or a directory of translated packages, each paired with
    the original of the same name under ``--original`` or named by its migrate report."""
    path = path.resolve()
    if not path.is_dir():
        raise TargetError(f"{path}: not a directory")
    if (path / "__init__.py").is_file():
        source = original or _report_source(path)
        if source is None:
            raise TargetError(f"{path}: no {path.name}.tern-report.json beside it; pass --original TF_PACKAGE")
        if not (source / "__init__.py").is_file():
            raise TargetError(f"{source}: the original is not a package directory (no __init__.py)")
        return [Target(source.resolve(), path)]
    children = [c for c in sorted(path.iterdir()) if c.is_dir() and (c / "__init__.py").is_file()]
    if original is not None:
        if (original / "__init__.py").is_file():
            raise TargetError(f"{original} is one package, PATH a directory of them: pass matching kinds")
        missing = [c.name for c in children if not (original / c.name / "__init__.py").is_file()]
        if missing:
            raise TargetError(f"no original under {original} for: {', '.join(missing)}")
        return [Target((original / c.name).resolve(), c) for c in children]
    found = [Target(src.resolve(), child) for child in children if (src := _report_source(child)) is not None]
    if not found:
        raise TargetError(f"{path}: neither a translated package nor a directory of them (run tern migrate first)")
    return found


def table(reports: list[PackageReport]) -> Table:
    grid = Table(title="tern verify")
    for name, justify in (("module", "left"), ("tests", "right"), ("replay", "right"), ("train", "right"),
                          ("max abs err", "right"), ("status", "left")):
        grid.add_column(name, justify=justify)
    for report in reports:
        for row in report.rows:
            tests = f"{row.tests_passed}/{row.tests_total}" if row.tests_total else "-"
            replay = f"{row.cases_matched}/{row.cases_total}" if row.cases_total else "-"
            train = f"{row.train_matched}/{row.train_total}" if row.train_total else "-"
            error = f"{row.max_abs:.2e}" if row.max_abs is not None else "-"
            grid.add_row(row.module, tests, replay, train, error, f"[{Status(row.status).style}]{row.status}[/]" + (" (cached)" if row.cached else ""))
    return grid


def probe_lines(reports: list[PackageReport]) -> list[str]:
    """Per package, what the probes beyond the tests' inputs found: values judged and not,
    and the one nearest to failing (which input, how far off)."""
    lines = []
    for report in reports:
        rows = [r for r in report.rows if r.probes_judged or r.probes_not_judged]
        if not rows:
            continue
        judged, not_judged = sum(r.probes_judged for r in rows), sum(r.probes_not_judged for r in rows)
        worst = max((r for r in rows if r.probe_worst), key=lambda r: (not r.probe_worst["ok"], r.probe_worst["used"]),
                    default=None)
        line = f"{report.package}: beyond the tests' inputs, {judged} values compared" + (
            f", {not_judged} ill-conditioned there (not judged)" if not_judged else "")
        if worst is not None:
            w = worst.probe_worst
            line += (f"; largest error {w['max_abs']:.2e} abs, {w['used']:.2g} of its tolerance: {w['target']} "
                     f"{w['name']}")
        lines.append(line)
    return lines


def problems(reports: list[PackageReport]) -> list[str]:
    return [line for report in reports for line in problem_lines(report)]


async def verify_targets(targets: list[Target], *, project: Path, daemon: str, use_cache: bool,
                         workers: int | None, progress: Any = None, executor: Any = None,
                         search: bool | None = None) -> tuple[list[PackageReport], dict]:
    """``executor``: an ``ExecutorConfig`` (None: this machine's pool, through the daemon per ``daemon``);
    ``search``: False skips the search beyond the probes whatever the config says (``verify_with``)."""
    from tern.sandbox.executor import open_executor

    # no writable roots: verification jobs write only their scratch (recordings are moved by the sandbox)
    async with open_executor(project, executor, daemon=daemon, workers=workers) as runner:
        return await verify_with(runner, targets, project=project, use_cache=use_cache, progress=progress, search=search)


async def verify_with(runner: Any, targets: list[Target], *, project: Path, use_cache: bool,
                      progress: Any = None, search: bool | None = None) -> tuple[list[PackageReport], dict]:
    """Verify ``targets`` with jobs run by ``runner`` (a client's, or the daemon's own Sandbox).
    ``search=False`` (``--no-search``): no search beyond the probes, for a quick check inside an
    edit loop (it is most of a warm run's worker time); None: as the config says."""
    import dataclasses

    from tern.sandbox.daemon import find_project
    from tern.verify.cache import Cache
    from tern.verify.config import load_config
    from tern.verify.run import PackageVerifier

    state = find_project(project) / ".tern"
    cache = Cache(state, enabled=use_cache)
    reports: list[PackageReport | None] = [None] * len(targets)
    try:
        async with anyio.create_task_group() as group:
            for index, target in enumerate(targets):
                async def one(index=index, target=target) -> None:
                    config = load_config(target.original)
                    if search is False:
                        config = dataclasses.replace(config, search_rounds=0)
                    verifier = PackageVerifier(target.original, target.translated, runner=runner, cache=cache,
                                               config=config, progress=progress)
                    reports[index] = await verifier.verify()
                    if progress:
                        progress(f"{target.original.name}: {reports[index].status}")
                group.start_soon(one)
        status = await runner.status()
    finally:
        cache.close()
    level = (status.get("sandbox") or status).get("isolation", "?") if isinstance(status, dict) else "?"
    info = {"daemon": bool(getattr(runner, "warm_daemon", False)), "cache_hits": cache.hits, "cache_misses": cache.misses,
            "isolation": {"level": level, "warning": isolation_warning(level)}}
    if isinstance(status, dict) and "executor" in status:  # a cluster: its nodes, actors lost, retries
        info["executor"] = status["executor"]
    return [r for r in reports if r is not None], info


def finish(reports: list[PackageReport], info: dict, targets: list[Target], json_path: Path | None, out: Console,
           *, cwd: Path | None = None) -> int:
    """Show the result, write the JSON report and name it; the exit code. ``json_path`` is
    shown as given and, when relative, written under ``cwd`` (the caller's directory)."""
    from tern.engine.runner import write_atomic

    render(reports, info, out)
    first = targets[0].translated
    where = first if len(targets) == 1 else first.parent
    path = json_path or where.with_name(where.name + ".tern-verify.json")
    write_atomic(path if cwd is None else cwd / path, json_report(reports, info).encode())
    out.print(f"report {path}", markup=False)
    return exit_code(reports)


def render(reports: list[PackageReport], info: dict, console: Console) -> None:
    console.print(table(reports))
    for line in [line for report in reports for line in session_lines(report.training)]:
        console.print(f"  {line}", markup=False, highlight=False)
    for line in problems(reports):
        console.print(f"  {line}", markup=False, highlight=False)
    for line in probe_lines(reports):
        console.print(f"  {line}", markup=False, highlight=False)
    counts = {s: sum(1 for r in reports for row in r.rows if row.status == s) for s in _terminal_order()}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items())
                  + f"; {info['cache_hits']} cached, {info['cache_misses']} run; isolation {info['isolation']['level']}"
                  + ("; warm daemon" if info["daemon"] else "") + _executor_note(info.get("executor")))
    if info["isolation"]["warning"]:
        console.print(f"warning: {info['isolation']['warning']}", style="yellow", markup=False, highlight=False)


def _terminal_order() -> list[Status]:
    """The terminal's summary counts passes first, then the rest worst first."""
    return sorted(Status.of_modules(), key=lambda s: (s != Status.EQUIVALENT, s.severity))


def _executor_note(executor: dict | None) -> str:
    if not executor:
        return ""
    return (f"; ray: {executor['nodes']} node(s), {executor['jobs_sent']} jobs sent, {executor['retries']} retried"
            + (f", {executor['lost_actors']} actor(s) lost" if executor["lost_actors"] else ""))


def exit_code(reports: list[PackageReport]) -> int:
    """0: nothing differs or broke (untested modules are listed, not failed); 1: a
    mismatch or an error."""
    return 1 if any(r.status.failing for r in reports) else 0


def json_report(reports: list[PackageReport], info: dict) -> str:
    return to_json(reports, {"run": info})
