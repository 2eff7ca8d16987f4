"""Run the agent over translated packages and fold what it did into the migrate report."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import anyio

from tern.agent.config import LLMConfig
from tern.agent.llm import ChatModel, OpenAIChat
from tern.agent.loop import AgentReport, Budget, PackageAgent
from tern.agent.pacing import Pacing
from tern.engine.report import Edit, RunReport, Todo, TODO_MARK


async def run_agent(pairs: list[tuple[Path, Path]], *, config: LLMConfig, project: Path, daemon: str = "auto",
                    workers: int | None = None, progress: Callable[[str], None] | None = None,
                    model: ChatModel | None = None) -> list[AgentReport]:
    """One ``PackageAgent`` per (original, translated) pair, concurrently, sharing the
    sandbox, the cache, the token budget and the concurrency limits."""
    from tern.sandbox.client import open_runner
    from tern.sandbox.daemon import find_project
    from tern.verify.cache import Cache
    from tern.verify.config import load_config

    state = find_project(project) / ".tern"
    cache = Cache(state)
    pacing = Pacing(config.llm_concurrency)
    chat = model or OpenAIChat(config, cache, pacing)
    budget = Budget(config.budget_tokens)
    sandbox_limit = anyio.CapacityLimiter(config.sandbox_concurrency)
    reports: list[AgentReport | None] = [None] * len(pairs)
    try:
        async with open_runner(project, daemon=daemon, workers=workers, writable_roots=(state,)) as runner:
            async with anyio.create_task_group() as group:
                for i, (original, translated) in enumerate(pairs):
                    async def one(i=i, original=original, translated=translated) -> None:
                        agent = PackageAgent(original, translated, model=chat, runner=runner, cache=cache,
                                             attempts=config.attempts, budget=budget, sandbox_limit=sandbox_limit,
                                             verify_config=load_config(original), progress=progress)
                        reports[i] = await agent.run()
                    group.start_soon(one)
    finally:
        if model is None:
            await chat.close()  # type: ignore[attr-defined]
        cache.close()
    done = [r for r in reports if r is not None]
    for report in done:
        report.concurrency = getattr(chat, "pacing", pacing).summary()
    return done


def parse_todos(text: str) -> list[Todo]:
    todos = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("#") and TODO_MARK in stripped:
            body = stripped.split(TODO_MARK, 1)[1].lstrip(": ").strip()
            construct, _, reason = body.partition(": ")
            todos.append(Todo(construct, reason, number))
    return todos


def fold_into(report: RunReport, agent: AgentReport, *, rules_seconds: float) -> None:
    """Accepted units become edits with the LLM's provenance; each touched file's TODOs
    and status are read again from what is now on disk."""
    out = Path(report.out)
    touched = {u.file for u in agent.units if u.status != "rejected"}
    for result in report.files:
        if result.path not in touched or result.status == "error":
            continue
        for unit in (u for u in agent.units if u.file == result.path and u.status in ("accepted", "resumed")):
            result.edits.append(Edit(rule=f"llm:{agent.model}", before=unit.name,
                                     after=f"{unit.status}: {unit.detail} ({unit.attempts} attempt(s), {unit.tokens} tokens)"))
        result.todos = parse_todos((out / result.path).read_text())
        result.status = "residue" if result.todos else "translated"
    llm_edits = sum(e.rule.startswith("llm") for f in report.files for e in f.edits)
    edits = sum(len(f.edits) for f in report.files)
    report.agent = {**agent.to_dict(),
                    "share": {"rules": edits - llm_edits, "llm": llm_edits},
                    "phases": {"rules": round(rules_seconds, 3), **{k: round(v, 3) for k, v in agent.phases.items()}}}
