"""Result values: what each rule did, what is left, per file and per run.

Workers return these (picklable, JSON-ready); nothing here raises for an outcome.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

TODO_MARK = "TODO(tern)"
#: a TODO comment as tern writes it: ``# TODO(tern): <construct>: <reason>``
TODO_LINE = re.compile(r"#\s*TODO\(tern\):\s*(?P<construct>[^:]+):\s*(?P<reason>.*)$")


@dataclass(frozen=True)
class Edit:
    rule: str
    before: str
    after: str


@dataclass(frozen=True)
class Todo:
    construct: str
    reason: str
    line: int = 0

    def comment(self) -> str:
        text = " ".join(f"{self.construct}: {self.reason}".split())  # one line, whatever the source spans
        return f"# {TODO_MARK}: {text}"


@dataclass(frozen=True)
class AllowedUse:
    """TensorFlow kept on purpose (``rules/allowed/``): not residue, but listed."""

    construct: str
    line: int
    why: str


@dataclass(frozen=True)
class Note:
    """What a translation does differently from the original where that is by design (not
    residue): e.g. fit's shuffling draws from NumPy's generator, not TensorFlow's."""

    construct: str
    text: str


#: ``skipped``: not a regular file (a FIFO, a device, a socket, a symlinked directory), never
#: opened; its note says what it is. Not an error: there is nothing in it to translate.
Status = Literal["translated", "residue", "unchanged", "copied", "skipped", "error"]


@dataclass
class FileResult:
    path: str
    status: Status
    edits: list[Edit] = field(default_factory=list)
    todos: list[Todo] = field(default_factory=list)
    allowed: list[AllowedUse] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    error: str = ""
    error_line: int = 0
    diff: str = ""
    #: what the file imports from its package's generated support module
    support: list[str] = field(default_factory=list)

    @property
    def rules_used(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for edit in self.edits:
            counts[edit.rule] = counts.get(edit.rule, 0) + 1
        return counts


@dataclass
class RunReport:
    source: str
    out: str
    files: list[FileResult] = field(default_factory=list)
    #: what the LLM fallback did (``tern.agent.run.fold_into``), None when it did not run
    agent: dict | None = None
    #: the generated support module (path relative to the output) and the definitions it holds
    support_module: str = ""
    support: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if any(f.status == "error" for f in self.files):
            return 2
        if any(f.todos for f in self.files):
            return 1
        return 0

    def totals(self) -> dict[str, int]:
        return {
            "files": len(self.files),
            "translated": sum(f.status == "translated" for f in self.files),
            "residue": sum(f.status == "residue" for f in self.files),
            "unchanged": sum(f.status == "unchanged" for f in self.files),
            "copied": sum(f.status == "copied" for f in self.files),
            "skipped": sum(f.status == "skipped" for f in self.files),
            "errors": sum(f.status == "error" for f in self.files),
            "edits": sum(len(f.edits) for f in self.files),
            "todos": sum(len(f.todos) for f in self.files),
            "allowed_tf": sum(len(f.allowed) for f in self.files),
        }

    def to_json(self) -> str:
        data = {
            "source": self.source,
            "out": self.out,
            "exit_code": self.exit_code,
            "totals": self.totals(),
            "files": [
                {k: v for k, v in asdict(f).items() if k != "diff"} for f in self.files
            ],
        }
        if self.support_module:
            data["support_module"] = {"path": self.support_module, "definitions": self.support}
        if self.agent is not None:
            data["agent"] = self.agent
        return json.dumps(data, indent=2, sort_keys=False) + "\n"

    def to_markdown(self) -> str:
        t = self.totals()
        lines = [
            f"# Tern migration report: `{self.source}`",
            "",
            f"{t['files']} files: {t['translated']} translated, {t['residue']} with residue, "
            f"{t['unchanged']} unchanged, {t['copied']} copied, "
            + (f"{t['skipped']} skipped, " if t["skipped"] else "")
            + f"{t['errors']} errors; "
            f"{t['edits']} edits, {t['todos']} TODOs"
            + (f"; {t['allowed_tf']} allowed TF uses (not residue)." if t["allowed_tf"] else "."),
            "",
            "## Files",
            "",
            "| file | status | edits | TODOs |",
            "| --- | --- | ---: | ---: |",
        ]
        if self.support_module:
            lines[3:3] = [f"Support code: `{self.support_module}`, generated, {len(self.support)} definitions "
                          f"({', '.join(f'`{n}`' for n in self.support)}).", ""]
        for f in self.files:
            lines.append(f"| `{f.path}` | {f.status} | {len(f.edits)} | {len(f.todos)} |")
        lines += _section("What still needs a human or the LLM fallback", ("where", "construct", "reason"),
                          [(f"`{f.path}:{t.line}`", f"`{t.construct}`", t.reason) for f in self.files for t in f.todos])
        lines += _section("Allowed TF use (kept on purpose, not residue)", ("where", "use", "why"),
                          [(f"`{f.path}:{u.line}`", f"`{u.construct}`", u.why) for f in self.files for u in f.allowed])
        lines += _section("Notes (by design, not residue)", ("file", "construct", "note"),
                          [(f"`{f.path}`", f"`{n.construct}`", n.text) for f in self.files for n in f.notes])
        errors = [f for f in self.files if f.status == "error"]
        if errors:
            lines += ["", "## Errors", ""]
            for f in errors:
                lines.append(f"- `{f.path}:{f.error_line}`: {f.error}" if f.error_line else f"- `{f.path}`: {f.error}")
        rules: dict[str, int] = {}
        for f in self.files:
            for rule, n in f.rules_used.items():
                rules[rule] = rules.get(rule, 0) + n
        if rules:
            lines += ["", "## Edits by rule", "", "| rule | edits |", "| --- | ---: |"]
            for rule, n in sorted(rules.items(), key=lambda kv: (-kv[1], kv[0])):
                lines.append(f"| `{rule}` | {n} |")
        if self.agent is not None:
            lines += _agent_markdown(self.agent)
        lines += ["", "## Edits", ""]
        for f in self.files:
            for edit in f.edits:
                lines.append(f"- `{f.path}` `{edit.rule}`: `{edit.before}` → `{edit.after}`")
        return "\n".join(lines) + "\n"


def _agent_markdown(agent: dict) -> list[str]:
    share = agent["share"]
    total = share["rules"] + share["llm"] or 1
    phases = ", ".join(f"{k} {v:.1f} s" for k, v in agent["phases"].items())
    counted = f" ({agent['counted_tokens']} counted by tern: no usage from the server)" if agent.get("counted_tokens") else ""
    lines = [
        "", "## LLM fallback", "",
        f"Model `{agent['model']}`: {agent['accepted']} of {len(agent['units'])} units accepted after verification; "
        f"{agent['attempts']} attempts, {agent['requests']} requests ({agent['cached_answers']} from the cache), "
        f"{agent['tokens']} tokens{counted}. Edits: {share['rules']} by rules ({100 * share['rules'] / total:.0f}%), "
        f"{share['llm']} by the LLM ({100 * share['llm'] / total:.0f}%). Time: {phases}."
        + (" Stopped: the token budget was spent." if agent.get("stopped") == "budget" else ""),
    ]
    if agent["units"]:
        lines += ["", "| unit | status | attempts | tokens | detail |", "| --- | --- | ---: | ---: | --- |"]
        for u in agent["units"]:
            detail = " ".join(u["detail"].split()).replace("|", "\\|")[:200]
            lines.append(f"| `{u['file']}::{u['name']}` | {u['status']} | {u['attempts']} | {u['tokens']} | {detail} |")
    return lines


def _section(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """A Markdown section holding one table, or nothing when there are no rows."""
    if not rows:
        return []
    lines = ["", f"## {title}", "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


class ReportError(ValueError):
    """A file that is not a migrate report tern can read."""


def read_report(path: Path) -> dict:
    """A migrate report (``<out>.tern-report.json``) as written by ``RunReport.to_json``;
    ReportError, one line naming the file, for anything else (unreadable, not JSON, not an
    object, no source)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ReportError(f"{path}: not a readable tern migrate report ({exc})") from None
    if not isinstance(data, dict):
        kind = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}.get(type(data), "null")
        raise ReportError(f"{path}: not a tern migrate report (a JSON {kind}, not an object)")
    if not isinstance(data.get("source"), str) or not isinstance(data.get("files", []), list):
        raise ReportError(f"{path}: not a tern migrate report (no \"source\" path)")
    return data
