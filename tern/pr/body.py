"""What a migration pull request says: its title, its body, its commit message, whether
it is a draft.

The body is written for the reviewer: what was migrated, how each module verified, what
is left (each TODO linked to its line), how much the deterministic rules did against the
LLM, and the commands that reproduce it. It stays under GitHub's 65536-character limit,
cutting the long middle (tables) and saying so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import quote

from tern.pr.packages import Package
from tern.engine.report import RunReport
from tern.status import Status
from tern.verify.report import PackageReport, to_markdown

BODY_LIMIT = 65536
MARKER = "<!-- tern-pr head="


@dataclass
class Migrated:
    """One package's migration in this run."""

    package: Package
    report: RunReport  # source and out relative to the repository
    source_tree: str
    verification: PackageReport | None = None
    verify_note: str = ""  # why there is no verification: skipped, or could not run


@dataclass(frozen=True)
class Context:
    server: str  # https://github.com, or a GitHub Enterprise Server
    repo: str
    branch: str
    base: str
    remote: str
    head: str  # the commit the body describes
    version: str
    group: str | None = None
    labels: tuple[str, ...] = field(default_factory=tuple)

    def blob(self, path: str, line: int | None = None) -> str:
        url = f"{self.server}/{self.repo}/blob/{quote(self.branch)}/{quote(path)}"
        return url + (f"#L{line}" if line else "")


def rules_share(items: list[Migrated]) -> tuple[int, int]:
    """(edits by deterministic rules, edits by the LLM): an edit whose rule id starts
    with ``llm`` is the LLM's."""
    edits = [e for m in items for f in m.report.files for e in f.edits]
    llm = sum(1 for e in edits if e.rule.startswith("llm"))
    return len(edits) - llm, llm


def unverified_modules(item: Migrated) -> list[str]:
    """Modules nothing was compared for although tern changed them (an ``__init__`` that
    only re-exports has nothing to verify)."""
    if item.verification is None:
        return []
    changed = {f.path for f in item.report.files if f.edits}
    found = []
    for row in item.verification.rows:
        if row.status != Status.UNTESTED:
            continue
        rel = row.module[len(item.verification.package):].lstrip(".").replace(".", "/")
        candidates = {f"{rel}.py", f"{rel}/__init__.py"} if rel else {"__init__.py"}
        if candidates & changed:
            found.append(row.module)
    return found


def draft_reasons(items: list[Migrated]) -> list[str]:
    reasons = []
    for m in items:
        name = f"`{m.package.rel}`"
        totals = m.report.totals()
        if totals["errors"]:
            reasons.append(f"{name}: {totals['errors']} file(s) could not be translated")
        if totals["todos"]:
            reasons.append(f"{name}: {totals['todos']} TODO(s) left")
        if m.verification is None:
            reasons.append(f"{name}: not verified: {m.verify_note or 'skipped'}")
            continue
        for status in Status.failing_modules():
            rows = [r.module for r in m.verification.rows if r.status == status]
            if rows:
                reasons.append(f"{name}: {len(rows)} module(s) {status}: " + ", ".join(f"`{r}`" for r in rows[:5]))
        if m.verification.record_error and not any(r.status == Status.ERROR for r in m.verification.rows):
            reasons.append(f"{name}: recording the original tests failed")
        untested = unverified_modules(m)
        if untested:
            reasons.append(f"{name}: {len(untested)} changed module(s) untested: " + ", ".join(f"`{r}`" for r in untested[:5]))
    return reasons


def title(items: list[Migrated], group: str | None) -> str:
    if group is None and len(items) == 1:
        return f"tern: migrate {items[0].package.rel} to JAX/Flax"
    names = ", ".join(m.package.name for m in items)
    text = f"tern: migrate {len(items)} packages to JAX/Flax ({group or 'group'}: {names})"
    return text if len(text) <= 200 else text[:197] + "..."


def commit_message(items: list[Migrated], *, group: str | None, version: str, update: bool) -> str:
    subject = title(items, group)
    if update:
        subject = subject.replace("tern: migrate", "tern: update the migration of", 1)
    lines = [subject, ""]
    for m in items:
        t = m.report.totals()
        verified = m.verification.status if m.verification else (m.verify_note or "not verified")
        lines.append(f"{m.package.rel} -> {m.package.out_rel}: {t['files']} files, {t['translated']} translated, "
                     f"{t['residue']} with residue, {t['errors']} errors; {t['edits']} edits, {t['todos']} TODOs; "
                     f"verification: {verified}")
    lines.append("")
    for m in items:
        lines += [f"Tern-Package: {m.package.rel}", f"Tern-Source: {m.source_tree}"]
    lines.append(f"Tern-Version: {version}")
    return "\n".join(lines) + "\n"


def body(items: list[Migrated], ctx: Context) -> str:
    reasons = draft_reasons(items)
    rules, llm = rules_share(items)
    total = rules + llm
    head = [_intro(items, ctx), ""]
    if reasons:
        head += ["**Draft**, because:", "", *(f"- {r}" for r in reasons), ""]
    else:
        head += ["**Ready for review**: every module tern changed was verified equivalent, and no TODO is left.", ""]
    head += ["| package | translation | files | edits | TODOs | verification |", "| --- | --- | ---: | ---: | ---: | --- |"]
    for m in items:
        t = m.report.totals()
        status = m.verification.status if m.verification else (m.verify_note or "not verified")
        head.append(f"| `{m.package.rel}` | [`{m.package.out_rel}`]({ctx.blob(m.package.out_rel)}) | {t['files']} | "
                    f"{t['edits']} | {t['todos']} | {status} |")
    middle: list[str] = []
    for m in items:
        middle += ["", f"## `{m.package.rel}`", ""]
        if m.verification is not None:
            middle += to_markdown([m.verification], level=3).rstrip("\n").splitlines()
        else:
            middle.append(f"Verification: {m.verify_note or 'not run'}.")
        middle += _todos(m, ctx) + _errors(m, ctx)
    tail = ["", "## Rules vs LLM", ""]
    if total:
        tail.append(f"{total} edits: {rules} by deterministic rules ({100 * rules / total:.0f}%), "
                    f"{llm} by the LLM ({100 * llm / total:.0f}%).")
    else:
        tail.append("No edits.")
    tail += ["", "## Reproduce locally", "", "```bash", *_reproduce(items, ctx), "```", "",
             f"<sub>tern {ctx.version} · branch `{ctx.branch}` · commit {ctx.head[:12]} · sources "
             + ", ".join(f"`{m.package.rel}` tree {m.source_tree[:12]}" for m in items) + "</sub>",
             f"{MARKER}{ctx.head} -->"]
    return fit(head, middle, tail)


def head_of(body_text: str | None) -> str | None:
    """The commit a body written by tern describes (None: not ours, or edited away)."""
    if not body_text or MARKER not in body_text:
        return None
    return body_text.split(MARKER, 1)[1].split(" ", 1)[0].strip()


def fit(head: list[str], middle: list[str], tail: list[str], limit: int = BODY_LIMIT) -> str:
    text = "\n".join(head + middle + tail) + "\n"
    if len(text) <= limit:
        return text
    fixed = len("\n".join(head + tail)) + 400
    kept, size = [], 0
    for line in middle:
        if fixed + size + len(line) + 1 > limit:
            break
        kept.append(line)
        size += len(line) + 1
    note = (f"> **Truncated**: {len(middle) - len(kept)} of {len(middle)} report lines are left out to stay under "
            f"GitHub's {limit}-character limit; the full reports are committed beside each translation "
            f"(`*.tern-report.md`, `*.tern-verify.md`).")
    return "\n".join(head + kept + ["", note] + tail) + "\n"


def _intro(items: list[Migrated], ctx: Context) -> str:
    verified = sum(1 for m in items if m.verification is not None)
    if len(items) == 1 and ctx.group is None:
        m = items[0]
        return (f"Tern migrated **`{m.package.rel}`** (with its tests) from TensorFlow/Keras to JAX/Flax into "
                f"`{m.package.out_rel}`" + (", and verified the translation against the original." if verified else "."))
    return (f"Tern migrated {len(items)} packages (group **{ctx.group}**) from TensorFlow/Keras to JAX/Flax, with "
            f"their tests" + (f", and verified {verified} of the translations against their originals." if verified else "."))


def _todos(m: Migrated, ctx: Context) -> list[str]:
    todos = [(f, t) for f in m.report.files for t in f.todos]
    if not todos:
        return []
    lines = ["", f"### TODOs ({len(todos)})", "", "| where | construct | reason |", "| --- | --- | --- |"]
    for f, todo in todos:
        path = f"{m.package.out_rel}/{f.path}"
        lines.append(f"| [`{f.path}:{todo.line}`]({ctx.blob(path, todo.line)}) | `{_cell(todo.construct)}` | "
                     f"{_cell(todo.reason)} |")
    return lines


def _errors(m: Migrated, ctx: Context) -> list[str]:
    errors = [f for f in m.report.files if f.status == "error"]
    if not errors:
        return []
    lines = ["", "### Files not translated (copied unchanged)", ""]
    for f in errors:
        path = f"{m.package.out_rel}/{f.path}"
        lines.append(f"- [`{f.path}:{f.error_line}`]({ctx.blob(path, f.error_line or None)}): {_cell(f.error)}")
    return lines


def _reproduce(items: list[Migrated], ctx: Context) -> list[str]:
    lines = [f"git fetch {ctx.remote} {ctx.branch} && git switch --detach FETCH_HEAD"]
    for m in items:
        p = m.package
        lines.append(f"tern migrate {p.rel} --out {p.out_rel} -q   # then: git diff --stat -- {p.out_rel} (empty)")
        lines.append(f"tern verify {p.out_rel} --original {p.rel}")
    paths = " ".join(m.package.rel for m in items)
    group = f" --group {ctx.group}" if ctx.group else ""
    lines.append(f"tern pr {paths} --base {ctx.base}{group} --dry-run   # what this bot does, without pushing")
    return lines


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|").replace("`", "'").replace("<", "&lt;").replace(">", "&gt;")
