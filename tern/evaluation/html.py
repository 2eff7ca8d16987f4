"""A self-contained HTML report: inline CSS and inline SVG charts, no script, nothing
fetched, so it opens offline from a file, an artifact store or a mail attachment.

Charts: the status of each case, the distribution of the compared errors (log scale),
time per phase per case, and the share of edits by rules vs the LLM.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from tern.evaluation.render import (
    context_line,
    edits,
    error,
    note,
    ratio,
    run_line,
    seconds,
    work,
)
from tern.evaluation.score import headline
from tern.status import Grade

PHASES = {"migrate": "#5c6bc0", "llm": "#ad1457", "llm_verify": "#f06292", "record": "#ef6c00", "replay": "#00897b",
          "tests": "#8e24aa"}
SOURCES = {"rules": "#1565c0", "LLM": "#ad1457"}
CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1200px;
       padding: 0 1rem; color: #1d1d1f; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
.muted { color: #666; } .headline { font-size: 1.2rem; font-weight: 600; }
table { border-collapse: collapse; width: 100%; margin: .5rem 0; }
th, td { border-bottom: 1px solid #e3e3e3; padding: .3rem .5rem; text-align: left; vertical-align: top; }
th { background: #f6f6f6; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.status { display: inline-block; padding: 0 .45rem; border-radius: .6rem; color: #fff; font-size: .85rem; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 1.5rem; }
figure { margin: 0; } figcaption { font-weight: 600; margin-bottom: .3rem; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
.bad { color: #c62828; } .good { color: #2e7d32; }
"""


def page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<link rel="icon" href="data:,"><title>{escape(title)}</title><style>{CSS}</style></head>'
            f"<body>{body}</body></html>\n")


def badge(status: str) -> str:
    grade = Grade.get(status)
    return f'<span class="status" style="background:{grade.color if grade else "#555"}">{escape(status)}</span>'


def _svg(chart_id: str, width: int, height: int, parts: list[str], label: str) -> str:
    return (f'<svg id="{chart_id}" class="chart" role="img" aria-label="{escape(label)}" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
            + "".join(parts) + "</svg>")


def _text(x: float, y: float, text: str, anchor: str = "start", extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" {extra}>{escape(text)}</text>'


def _rect(x: float, y: float, w: float, h: float, color: str, title: str) -> str:
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{h:.1f}" fill="{color}">'
            f"<title>{escape(title)}</title></rect>")


def _legend(items: dict[str, str], y: float, x: float = 0) -> list[str]:
    parts = []
    for name, color in items.items():
        parts += [_rect(x, y - 9, 10, 10, color, name), _text(x + 14, y, name)]
        x += 24 + 7 * len(name)
    return parts


# -- charts ---------------------------------------------------------------------------------------


def status_chart(cases: list[dict], counts: dict[str, int]) -> str:
    width, label_w, row = 560, 220, 16
    total = max(sum(counts.values()), 1)
    parts, x = [], 0.0
    for status in Grade:
        w = width * counts.get(status, 0) / total
        parts.append(_rect(x, 0, w, 22, status.color, f"{status}: {counts.get(status, 0)}"))
        if w > 24:
            parts.append(_text(x + w / 2, 15, str(counts.get(status, 0)), "middle", 'style="fill:#fff"'))
        x += w
    parts += _legend({grade: grade.color for grade in Grade}, 42)
    for i, case in enumerate(cases):
        y = 56 + i * row
        parts.append(_text(label_w - 6, y + 11, _short(case["id"], 34), "end"))
        parts.append(_rect(label_w, y + 1, width - label_w, row - 3, Grade(case["status"]).color,
                           f"{case['id']}: {case['status']}: {case['reason']}"))
        parts.append(_text(label_w + 6, y + 11, case["status"], extra='style="fill:#fff"'))
    return _svg("chart-status", width, 60 + len(cases) * row, parts, "status per case")


def error_chart(cases: list[dict]) -> str:
    """Per case its largest absolute error on a log axis (1e-12 .. 1), with the default
    float32 tolerance marked; cases with nothing compared are left empty."""
    width, label_w, row, low, high = 560, 220, 16, -12, 0
    span = width - label_w - 10

    def x_of(value: float) -> float:
        exponent = min(max(math.log10(value), low), high) if value > 0 else low
        return label_w + span * (exponent - low) / (high - low)

    parts = []
    for exponent in range(low, high + 1, 2):
        x = x_of(10.0 ** exponent)
        parts += [f'<line x1="{x:.1f}" y1="14" x2="{x:.1f}" y2="{20 + len(cases) * row}" stroke="#ddd"/>',
                  _text(x, 10, f"1e{exponent}", "middle")]
    tol = x_of(1e-5)
    parts.append(f'<line x1="{tol:.1f}" y1="14" x2="{tol:.1f}" y2="{20 + len(cases) * row}" stroke="#c62828" '
                 f'stroke-dasharray="4 3"><title>default tolerance 1e-5</title></line>')
    for i, case in enumerate(cases):
        y = 18 + i * row
        parts.append(_text(label_w - 6, y + 11, _short(case["id"], 34), "end"))
        if case.get("max_abs") is not None:
            parts.append(_rect(label_w, y + 2, x_of(case["max_abs"]) - label_w, row - 5, Grade(case["status"]).color,
                               f"{case['id']}: max abs {case['max_abs']:.3g}"))
        else:
            parts.append(_text(label_w + 4, y + 11, "nothing compared", extra='class="muted" style="fill:#999"'))
    return _svg("chart-errors", width, 26 + len(cases) * row, parts, "max abs error per case, log scale")


def histogram_chart(cases: list[dict]) -> str:
    """Every compared output and gradient of the run, counted per decade of its max abs error."""
    buckets: dict[str, int] = {}
    for case in cases:
        for decade, count in case.get("error_decades", {}).items():
            buckets[decade] = buckets.get(decade, 0) + count
    decades = ["zero"] + [str(d) for d in range(-16, 1)]
    width, height, base = 560, 200, 170
    top = max(buckets.values(), default=1)
    step = width / len(decades)
    parts = []
    for i, decade in enumerate(decades):
        count = buckets.get(decade, 0)
        h = (base - 20) * count / top
        label = "0" if decade == "zero" else f"1e{decade}"
        parts.append(_rect(i * step + 2, base - h, step - 4, h, "#00897b" if decade == "zero" or int(decade) < -5 else "#c62828",
                           f"{label}: {count} compared values"))
        if count:
            parts.append(_text(i * step + step / 2, base - h - 3, str(count), "middle"))
        if i % 2 == 0:
            parts.append(_text(i * step + step / 2, base + 14, label, "middle"))
    parts.append(f'<line x1="0" y1="{base}" x2="{width}" y2="{base}" stroke="#999"/>')
    return _svg("chart-histogram", width, height, parts, "compared outputs and gradients per decade of error")


def phase_chart(cases: list[dict]) -> str:
    width, label_w, row = 560, 220, 16
    totals = [sum(case.get("phases", {}).get(p, 0.0) for p in PHASES) for case in cases]
    top = max(totals, default=0.0) or 1.0
    span = width - label_w - 50
    parts = _legend(PHASES, 12)
    for i, case in enumerate(cases):
        y = 20 + i * row
        parts.append(_text(label_w - 6, y + 11, _short(case["id"], 34), "end"))
        x = float(label_w)
        for phase, color in PHASES.items():
            value = case.get("phases", {}).get(phase, 0.0)
            w = span * value / top
            parts.append(_rect(x, y + 2, w, row - 5, color, f"{case['id']}: {phase} {value:.2f} s"))
            x += w
        parts.append(_text(x + 4, y + 11, f"{totals[i]:.1f} s" + (" (cached)" if case.get("cached") else "")))
    return _svg("chart-phases", width, 26 + len(cases) * row, parts, "seconds per phase per case")


def share_chart(cases: list[dict], summary: dict) -> str:
    width, label_w, row = 560, 220, 16
    rules, llm = summary.get("edits_rules", 0), summary.get("edits_llm", 0)
    total = max(rules + llm, 1)
    parts = [_rect(0, 0, width * rules / total, 22, SOURCES["rules"], f"rules: {rules} edits"),
             _rect(width * rules / total, 0, width * llm / total, 22, SOURCES["LLM"], f"LLM: {llm} edits"),
             _text(6, 15, f"rules {rules} · LLM {llm} ({summary.get('llm_share', 0.0):.0%}) · "
                          f"{summary.get('attempts', 0)} attempts · {summary.get('tokens', 0)} tokens",
                   extra='style="fill:#fff"')]
    parts += _legend(SOURCES, 42)
    for i, case in enumerate(cases):
        y = 56 + i * row
        n = case["edits_rules"] + case["edits_llm"]
        parts.append(_text(label_w - 6, y + 11, _short(case["id"], 34), "end"))
        if not n:
            parts.append(_text(label_w + 4, y + 11, "no edits", extra='style="fill:#999"'))
            continue
        span = width - label_w - 60
        w_rules = span * case["edits_rules"] / n
        parts.append(_rect(label_w, y + 2, w_rules, row - 5, SOURCES["rules"], f"{case['id']}: {case['edits_rules']} rule edits"))
        parts.append(_rect(label_w + w_rules, y + 2, span - w_rules, row - 5, SOURCES["LLM"],
                           f"{case['id']}: {case['edits_llm']} LLM edits"))
        parts.append(_text(label_w + span + 4, y + 11, f"{case['edits_rules']}/{case['edits_llm']}"))
    return _svg("chart-share", width, 60 + len(cases) * row, parts, "edits by rules vs the LLM")


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else "…" + text[-(limit - 1):]


# -- pages ----------------------------------------------------------------------------------------


def _scorecard(cases: list[dict], table_id: str = "scorecard") -> str:
    head = "".join(f"<th>{h}</th>" for h in ("case", "status", "translated", "TODOs", "tests", "replay", "max abs err",
                                             "max rel err", "training", "edits rules/LLM", "attempts", "tokens", "work s", "wall s", ""))
    rows = []
    for c in cases:
        cells = [f"<td><code>{escape(c['id'])}</code></td>", f"<td>{badge(c['status'])}</td>",
                 f"<td>{'yes' if c['translated'] else 'no'}</td>"]
        cells += [f'<td class="num">{escape(v)}</td>' for v in (
            str(c["residue"]), ratio(c["tests_passed"], c["tests_total"]), ratio(c["replay_matched"], c["replay_total"]),
            error(c["max_abs"]), error(c["max_rel"]), c.get("training", "n/a"), edits(c), str(c["attempts"]),
            str(c["tokens"]), seconds(work(c)), seconds(c["seconds"]))]
        cells.append(f"<td>{escape(note(c))}</td>")
        rows.append(f'<tr data-case="{escape(c["id"])}" data-status="{escape(c["status"])}" '
                    f'title="{escape(c["reason"])}">{"".join(cells)}</tr>')
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _reasons(cases: list[dict]) -> str:
    items = []
    for c in cases:
        problems = "".join(f"<li><code>{escape(p)}</code></li>" for p in c.get("problems", [])[:12])
        extra = f"<ul>{problems}</ul>" if problems else ""
        items.append(f"<details><summary><code>{escape(c['id'])}</code> {badge(c['status'])} "
                     f"{escape(c['reason'])}</summary>{extra}</details>")
    return "".join(items)


def _diff_tables(comparison: dict) -> str:
    out = []
    for title, entries, css in (("Regressions", comparison["regressions"], "bad"),
                                ("Improvements", comparison["improvements"], "good")):
        out.append(f'<h3 class="{css}">{len(entries)} {title.lower()}</h3>')
        if entries:
            rows = "".join(f"<tr><td><code>{escape(e['case'])}</code></td><td>{escape(e['what'])}</td>"
                           f"<td>{escape(_value(e['before']))}</td><td>{escape(_value(e['after']))}</td></tr>" for e in entries)
            out.append(f'<table id="{title.lower()}"><thead><tr><th>case</th><th>what</th><th>before</th><th>after</th>'
                       f"</tr></thead><tbody>{rows}</tbody></table>")
    if comparison["new"]:
        out.append("<p>New cases: " + ", ".join(f"<code>{escape(n['case'])}</code> ({escape(n['status'])})"
                                                for n in comparison["new"]) + "</p>")
    score, weighted = comparison["score"], comparison["weighted"]
    out.insert(0, f'<p class="headline">score {score["before"]:.1%} → {score["after"]:.1%} '
                  f'({(score["after"] - score["before"]) * 100:+.1f} points), weighted {weighted["before"]:.1%} → '
                  f'{weighted["after"]:.1%}; {comparison["unchanged"]} cases unchanged</p>')
    return "".join(out)


def _value(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2e}" if isinstance(value, float) else str(value)


def _training(cases: list[dict]) -> str:
    checked = [c for c in cases if c.get("training", "n/a") != "n/a"]
    if not checked:
        return "n/a (no case's tests call a training step)"
    return f"{sum(c['training'] == 'equivalent' for c in checked)}/{len(checked)} equivalent"


def run_page(report: dict[str, Any]) -> str:
    cases, summary = report["cases"], report["summary"]
    suites = ", ".join(s["name"] for s in report["suites"])
    body = [
        f"<h1>tern eval: {escape(suites)}</h1>",
        f'<p class="headline" id="headline">{escape(headline(summary))}</p>',
        f'<p class="muted">{escape(context_line(report))}<br>{escape(run_line(report))}</p>',
        (f"<p>Translated tests {summary['tests_passed']}/{summary['tests_total']} passed · replayed calls "
         f"{summary['replay_matched']}/{summary['replay_total']} matched · {summary['residue']} TODOs left · "
         f"training-step equivalence: {_training(cases)}</p>"),
    ]
    if report.get("comparison"):
        body += ["<h2>Against the baseline</h2>", _diff_tables(report["comparison"])]
    body += [
        "<h2>Scorecard</h2>", _scorecard(cases),
        '<h2>Charts</h2><div class="charts">',
        f"<figure><figcaption>Status per case</figcaption>{status_chart(cases, summary['counts'])}</figure>",
        f"<figure><figcaption>Largest error per case (log scale)</figcaption>{error_chart(cases)}</figure>",
        ("<figure><figcaption>Error distribution: compared outputs and gradients per decade</figcaption>"
         f"{histogram_chart(cases)}</figure>"),
        f"<figure><figcaption>Time per phase (worker seconds)</figcaption>{phase_chart(cases)}</figure>",
        f"<figure><figcaption>Edits by rules vs the LLM</figcaption>{share_chart(cases, summary)}</figure>",
        "</div>",
        "<h2>Why</h2>", _reasons(cases),
        ('<p class="muted">verified: complete translation, something compared, everything within tolerance, '
         "every module with code compared · partially verified: some modules equivalent, none mismatched, the rest "
         "residue, errors or uncompared · unverified: nothing compared · failed: a mismatch, or nothing equivalent "
         "and errors. Score: share of cases verified; weighted: verified 1, partially verified 0.5.</p>"),
    ]
    return page(f"tern eval: {suites}", "".join(body))


def compare_page(comparison: dict[str, Any], before: dict[str, Any], after: dict[str, Any]) -> str:
    body = ["<h1>tern eval: comparison</h1>",
            f'<p class="muted">baseline {escape(context_line(before))}<br>run {escape(context_line(after))}</p>',
            _diff_tables(comparison),
            "<h2>Baseline</h2>", _scorecard(before["cases"], "baseline-cases"), "<h2>Run</h2>",
            _scorecard(after["cases"], "run-cases")]
    return page("tern eval: comparison", "".join(body))
