"""The agent's part of ``tern migrate`` and ``tern rules suggest``: deciding whether an LLM
runs, running it, and showing what it did."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional

from rich.console import Console
from rich.table import Table

from tern.agent.config import NOT_CONFIGURED, LLMConfig, load_llm_config
from tern.agent.loop import AgentReport

STYLES = {"accepted": "green", "resumed": "green", "unverified": "yellow", "failed": "red", "rejected": "red",
          "budget": "yellow", "llm_error": "red"}


class AgentUsageError(ValueError):
    pass


def choose(source: Path, *, llm: Optional[bool], in_place: bool, dry_run: bool, overrides: dict,
           project: Path, env: Optional[Mapping[str, str]] = None) -> tuple[LLMConfig | None, str]:
    """The LLM to use (None: rules only) and the line that says why when there is none.

    ``llm``: True (required), False (``--no-llm``), None (when configured). The settings
    are the project's (where tern runs, like its cache and sandbox), not the package's;
    ``env``: the environment to read them from (default: this process's)."""
    if llm is False:
        return None, ""
    config = load_llm_config(project, env, **overrides)
    if config is None:
        if llm:
            raise AgentUsageError("--llm: " + NOT_CONFIGURED.removeprefix("rules only: "))
        return None, NOT_CONFIGURED
    blocker = ("--dry-run writes nothing to verify" if dry_run else
               "--in-place leaves no original to verify against (use --out)" if in_place else
               "the LLM fallback works on a package directory (with __init__.py)" if not (source / "__init__.py").is_file() else "")
    if blocker:
        if llm:
            raise AgentUsageError(f"--llm: {blocker}")
        return None, f"rules only: {blocker}"
    return config, ""


def table(reports: list[AgentReport]) -> Table:
    grid = Table(title="LLM fallback")
    for name, justify in (("unit", "left"), ("status", "left"), ("attempts", "right"), ("tokens", "right"), ("detail", "left")):
        grid.add_column(name, justify=justify)
    for report in reports:
        for u in report.units:
            grid.add_row(f"{report.package}/{u.file}::{u.name}", f"[{STYLES.get(u.status, 'white')}]{u.status}[/]",
                         str(u.attempts), str(u.tokens), " ".join(u.detail.split())[:90])
    return grid


def summary(reports: list[AgentReport], config: LLMConfig) -> str:
    units = [u for r in reports for u in r.units]
    accepted = sum(u.status in ("accepted", "resumed") for u in units)
    tokens, counted = sum(r.tokens for r in reports), sum(r.counted_tokens for r in reports)
    line = (f"{config.model}: {accepted} of {len(units)} units verified and kept; {sum(u.attempts for u in units)} attempts, "
            f"{sum(r.answers for r in reports)} answers ({sum(r.rejected_answers for r in reports)} rejected before running, "
            f"{sum(r.cached_answers for r in reports)} from the cache), {tokens} tokens"
            + (f" ({counted} counted by tern: no usage from the server)" if counted else ""))
    if any(r.stopped == "budget" for r in reports):
        line += f"; stopped: token budget of {config.budget_tokens} spent"
    pacing = reports[0].concurrency if reports else {}
    if pacing.get("changes"):
        line += f"\nLLM requests at once: {pacing['configured']} -> {pacing['final']} ({pacing['changes'][-1].split(': ', 1)[1]})"
    return line


def print_suggestions(project: Path, min_support: int, console: Console) -> int:
    from tern.agent.suggest import suggest
    from tern.sandbox.daemon import find_project
    from tern.verify.cache import Cache

    cache = Cache(find_project(project) / ".tern")
    entries = cache.values("agent")
    cache.close()
    found = suggest(entries, min_support=min_support)
    if not found:
        console.print(f"no pattern repeated in {min_support}+ accepted LLM translations ({len(entries)} accepted units journaled)")
        return 0
    grid = Table(title=f"candidate rules from {len(entries)} accepted LLM translations")
    for name in ("TF construct", "units", "JAX symbols the LLM used", "cases"):
        grid.add_column(name)
    for s in found:
        grid.add_row(s.construct, str(s.support), ", ".join(f"{t} ({n})" for t, n in s.targets) or "-", "\n".join(s.cases[:4]))
    console.print(grid)
    for s in found:
        for before, after in s.examples:
            console.print(f"  {s.construct}: {before}  ->  {after}", markup=False, highlight=False)
    return 0
