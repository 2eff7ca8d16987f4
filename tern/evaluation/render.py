"""The scorecard and the diff of two runs, for the terminal (rich) and as Markdown.

Both render the run's JSON (``report.build``), so a saved run shows as a fresh one does.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from tern.evaluation.score import headline
from tern.status import Grade


def ratio(done: int, total: int) -> str:
    return f"{done}/{total}" if total else "-"


def error(value: float | None) -> str:
    return f"{value:.1e}" if value is not None else "-"


def edits(case: dict[str, Any]) -> str:
    return f"{case['edits_rules']}/{case['edits_llm']}"


def seconds(value: float) -> str:
    return f"{value:.1f}"


def note(case: dict[str, Any]) -> str:
    parts = []
    if case.get("cached"):
        parts.append("cached")
    if case.get("expectation") in ("worse", "better"):
        parts.append(f"{case['expectation']} than expected ({case['expect']})")
    return ", ".join(parts)


def run_line(report: dict[str, Any]) -> str:
    run = report["run"]
    parts = [f"{len(report['cases'])} cases", f"{run['case_hits']} from cache"]
    if run["runner_opened"]:
        parts.append(f"{run['jobs_run']} sandbox jobs run, {run['jobs_cached']} cached")
        if run.get("isolation"):
            parts.append(f"isolation {run['isolation']}")
        if run.get("daemon"):
            parts.append("warm daemon")
    else:
        parts.append("sandbox not started")
    parts.append(f"{run['seconds']:.1f} s")
    return "; ".join(parts)


def context_line(report: dict[str, Any]) -> str:
    git = report.get("git") or {}
    commit = f"commit {git['commit'][:10]}" + (" (dirty)" if git.get("dirty") else "") if git.get("commit") else "no git"
    return f"{report['options'].get('mode_line', '')} · tern {report['tern_version']} · {commit} · {report['timestamp']}"


# -- terminal ------------------------------------------------------------------------------------


def case_label(report: dict[str, Any], case: dict[str, Any]) -> str:
    """The case's id, without the suite's name when the run has one suite."""
    return case["name"] if len(report["suites"]) == 1 else case["id"]


def work(case: dict[str, Any]) -> float:
    """Seconds of work for the case (migrate and the sandbox jobs it ran), not its wall
    time: cases share the runner, so their wall times overlap."""
    return sum(case.get("phases", {}).values())


def table(report: dict[str, Any], width: int = 120) -> Table:
    """The scorecard; under 110 columns without the translated, edits and time columns
    (they are in the JSON, the Markdown and the HTML)."""
    wide = width >= 110
    grid = Table(title=f"tern eval: {', '.join(s['name'] for s in report['suites'])}", box=box.SIMPLE_HEAD,
                 pad_edge=False)
    grid.add_column("case", no_wrap=True, overflow="ellipsis")
    grid.add_column("status", no_wrap=True)
    names = ("transl.", "TODOs", "tests", "replay", "max err", "rules/LLM", "work s") if wide else \
        ("TODOs", "tests", "replay", "max err")
    for name in names:
        grid.add_column(name, justify="right", no_wrap=True)
    notes = wide and any(note(case) for case in report["cases"])
    if notes:
        grid.add_column("", overflow="fold")
    for case in report["cases"]:
        status = case["status"]
        values = {"transl.": "yes" if case["translated"] else "no", "TODOs": str(case["residue"]),
                  "tests": ratio(case["tests_passed"], case["tests_total"]),
                  "replay": ratio(case["replay_matched"], case["replay_total"]), "max err": error(case["max_abs"]),
                  "rules/LLM": edits(case), "work s": seconds(work(case))}
        grid.add_row(case_label(report, case), f"[{Grade(status).style}]{status}[/]", *(values[n] for n in names),
                     *([note(case)] if notes else []))
    return grid


def scorecard(report: dict[str, Any], console: Console) -> None:
    console.print(table(report, console.width))
    for case in report["cases"]:
        if case["status"] != Grade.VERIFIED:
            console.print(f"  {case['id']}: {case['status']}: {case['reason']}", markup=False, highlight=False)
    for suite in report["suites"]:
        for line in suite["notes"]:
            console.print(f"  {suite['name']}: {line}", markup=False, highlight=False)
    summary = report["summary"]
    console.print(f"[bold]{headline(summary)}[/]")
    for what, word in (("worse_than_expected", "worse"), ("better_than_expected", "better")):
        if summary[what]:
            console.print(f"{len(summary[what])} cases {word} than their suite expects: {', '.join(summary[what])}",
                          markup=False, highlight=False)
    console.print(run_line(report), markup=False, highlight=False)
    if report["run"].get("isolation_warning"):
        console.print(f"warning: {report['run']['isolation_warning']}", markup=False, highlight=False)


def diff(comparison: dict[str, Any], console: Console) -> None:
    score, weighted = comparison["score"], comparison["weighted"]
    console.print(f"[bold]score {score['before']:.1%} -> {score['after']:.1%}[/] "
                  f"({(score['after'] - score['before']) * 100:+.1f} points), weighted "
                  f"{weighted['before']:.1%} -> {weighted['after']:.1%}")
    for title, entries, style in (("regressions", comparison["regressions"], "red"),
                                  ("improvements", comparison["improvements"], "green")):
        if not entries:
            console.print(f"no {title}")
            continue
        grid = Table(title=f"{len(entries)} {title}", title_style=style)
        for name in ("case", "what", "before", "after"):
            grid.add_column(name)
        for entry in entries:
            grid.add_row(entry["case"], entry["what"], _value(entry["before"]), _value(entry["after"]))
        console.print(grid)
    if comparison["new"]:
        console.print("new cases: " + ", ".join(f"{n['case']} ({n['status']})" for n in comparison["new"]),
                      markup=False, highlight=False)
    console.print(f"{comparison['unchanged']} cases unchanged")


def _value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2e}"
    return str(value)


# -- Markdown ------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(report: dict[str, Any]) -> str:
    summary = report["summary"]
    counts = summary["counts"]
    lines = [
        f"## tern eval: {', '.join(s['name'] for s in report['suites'])}",
        "",
        (f"**score {summary['score']:.1%}** ({counts['verified']}/{summary['cases']} verified) · "
         f"weighted {summary['weighted']:.1%} · " + " · ".join(f"{Grade(s).icon} {n} {s}" for s, n in counts.items())),
        "",
        f"{context_line(report)} · {run_line(report)}",
        "",
        (f"Translated tests {summary['tests_passed']}/{summary['tests_total']} passed, replayed calls "
         f"{summary['replay_matched']}/{summary['replay_total']} matched, {summary['residue']} TODOs left, "
         f"edits {summary['edits_rules']} by rules / {summary['edits_llm']} by the LLM "
         f"({summary['attempts']} attempts, {summary['tokens']} tokens)."),
        "",
    ]
    if report.get("comparison"):
        lines += diff_markdown(report["comparison"], heading="###", title="Against the baseline")
    lines += [
        "| case | status | translated | TODOs | tests | replay | max abs err | edits rules/LLM | work s |",
        "| --- | --- | :-: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for case in report["cases"]:
        extra = f" ({note(case)})" if note(case) else ""
        lines.append(f"| `{_cell(case['id'])}` | {Grade(case['status']).icon} {case['status']}{extra} | "
                     f"{'yes' if case['translated'] else 'no'} | {case['residue']} | "
                     f"{ratio(case['tests_passed'], case['tests_total'])} | {ratio(case['replay_matched'], case['replay_total'])} | "
                     f"{error(case['max_abs'])} | {edits(case)} | {seconds(work(case))} |")
    reasons = [case for case in report["cases"] if case["status"] != Grade.VERIFIED]
    if reasons:
        lines += ["", "<details><summary>Why the other cases are not verified</summary>", ""]
        lines += [f"- `{_cell(c['id'])}`: **{c['status']}**: {_cell(c['reason'])}" for c in reasons]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def diff_markdown(comparison: dict[str, Any], heading: str = "##", title: str = "tern eval: comparison") -> list[str]:
    score, weighted = comparison["score"], comparison["weighted"]
    base, run = comparison["baseline"], comparison["run"]
    lines = [
        f"{heading} {title}",
        "",
        (f"score **{score['before']:.1%} → {score['after']:.1%}** ({(score['after'] - score['before']) * 100:+.1f} "
         f"points), weighted {weighted['before']:.1%} → {weighted['after']:.1%}; "
         f"{len(comparison['regressions'])} regressions, {len(comparison['improvements'])} improvements, "
         f"{len(comparison['new'])} new cases, {comparison['unchanged']} unchanged."),
        "",
        (f"Baseline {base.get('timestamp')} ({(base.get('options') or {}).get('mode', '?')}), "
         f"run {run.get('timestamp')} ({(run.get('options') or {}).get('mode', '?')})."),
        "",
    ]
    for name, entries in (("Regressions", comparison["regressions"]), ("Improvements", comparison["improvements"])):
        if not entries:
            continue
        lines += [f"**{name}**", "", "| case | what | before | after |", "| --- | --- | --- | --- |"]
        lines += [f"| `{_cell(e['case'])}` | {_cell(e['what'])} | {_cell(_value(e['before']))} | {_cell(_value(e['after']))} |"
                  for e in entries]
        lines.append("")
    if comparison["new"]:
        lines += ["New cases: " + ", ".join(f"`{n['case']}` ({n['status']})" for n in comparison["new"]), ""]
    return lines
