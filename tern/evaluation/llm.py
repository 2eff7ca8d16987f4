"""The seam to the LLM agent (``tern/agent``): whether a run uses it, and running it.

Same choice as ``tern migrate``: ``--llm`` demands a configured LLM (bad usage
otherwise), ``--no-llm`` runs rules only, and by default the LLM runs when one is
configured, else the run says "rules only" in one line. With an LLM, the rules translate
every case first, then the agent works on what they left, all cases sharing one token
budget (``tern.agent.run.run_agent``), and folds its accepted units into each migrate
report as edits by ``llm:MODEL`` with an ``agent`` section (tokens, attempts): the eval
reads provenance from there as it does for rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LlmSetup:
    config: Any | None  # tern.agent.config.LLMConfig when the LLM is used
    line: str  # what the terminal says about the mode

    @property
    def mode(self) -> str:
        return "rules+llm" if self.config is not None else "rules"

    def key(self) -> dict[str, Any]:
        """What of the LLM's setup a cached result depends on (never the API key)."""
        if self.config is None:
            return {}
        return {k: getattr(self.config, k, None) for k in ("model", "base_url", "temperature", "max_tokens", "attempts",
                                                            "budget_tokens")}


def setup(project: Path, requested: bool | None) -> LlmSetup:
    """``requested``: True (--llm), False (--no-llm) or None (the LLM when configured).

    Raises ``ValueError`` for --llm without an LLM and for a malformed LLM configuration."""
    from tern.agent.config import NOT_CONFIGURED, load_llm_config

    if requested is False:
        return LlmSetup(None, "rules only (--no-llm)")
    config = load_llm_config(project)
    if config is None:
        if requested:
            raise ValueError("--llm: " + NOT_CONFIGURED.removeprefix("rules only: "))
        return LlmSetup(None, NOT_CONFIGURED)
    return LlmSetup(config, f"rules + LLM: {config.describe()}")


def run_agent(pairs: list[tuple[Path, Path]], *, config: Any, project: Path, daemon: str,
              workers: int | None) -> list[Any]:
    """The agent over (original, translated) pairs, one ``AgentReport`` each, in order."""
    import anyio

    from tern.agent.run import run_agent as agent

    return anyio.run(lambda: agent(pairs, config=config, project=project, daemon=daemon, workers=workers))


def fold(report: Any, agent_report: Any, *, rules_seconds: float) -> dict[str, float]:
    """Fold the agent's work into the migrate report; its phases (seconds)."""
    from tern.agent.run import fold_into

    fold_into(report, agent_report, rules_seconds=rules_seconds)
    phases = (report.agent or {}).get("phases", {})
    return {"llm": float(phases.get("llm", 0.0)), "llm_verify": float(phases.get("verify", 0.0))}
