"""Which LLM the agent talks to, from flags, the environment and ``[tool.tern.llm]``.

Anything that speaks the OpenAI chat-completions protocol works: OpenAI itself, vLLM,
Ollama, a llama.cpp server. Precedence: explicit overrides, then the environment
(``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``TERN_LLM_MODEL``), then the nearest
``pyproject.toml``:

```toml
[tool.tern.llm]
model = "qwen2.5-coder-32b"
base_url = "http://localhost:8000/v1"
api_key_env = "MY_LLM_KEY"     # the variable holding the key (never the key itself)
temperature = 0.0
max_tokens = 4096              # the cap; each answer is sized from its unit below it
first_token_timeout = 300      # seconds to the first token (the server's queue and the prompt)
idle_timeout = 60              # seconds between tokens once the answer is arriving
max_retries = 3                # on 429, 5xx and connection errors before the answer began (with backoff)
attempts = 3                   # answers per unit before the best one is kept with a TODO
budget_tokens = 200000         # per run; the loop stops cleanly when it is spent
llm_concurrency = 4            # requests in flight
sandbox_concurrency = 1        # package verifications in flight
```

No model configured means rules only; the caller says so in one line.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

from tern.verify.config import ConfigError, find_pyproject

#: the variable naming the model; OPENAI_* are the client's own
MODEL_ENV = "TERN_LLM_MODEL"


@dataclass(frozen=True)
class LLMConfig:
    model: str
    base_url: str | None = None
    api_key: str = ""
    temperature: float = 0.0
    max_tokens: int = 4096
    first_token_timeout: float = 300.0
    idle_timeout: float = 60.0
    max_retries: int = 3
    attempts: int = 3
    budget_tokens: int = 200_000
    llm_concurrency: int = 4
    sandbox_concurrency: int = 1
    source: str = ""

    def describe(self) -> str:
        """One line for the terminal and the report; never the key."""
        where = self.base_url or "https://api.openai.com/v1"
        return f"{self.model} at {where} (from {self.source}; {self.attempts} attempts per unit, budget {self.budget_tokens} tokens)"


_NUMBERS = {"temperature": float, "max_tokens": int, "first_token_timeout": float, "idle_timeout": float,
            "max_retries": int, "attempts": int, "budget_tokens": int, "llm_concurrency": int, "sandbox_concurrency": int}
#: keys that were renamed: a table still using one gets the new names, not "unknown key"
_RENAMED = {"timeout": "first_token_timeout and idle_timeout (answers are streamed: one total limit either cut slow "
                       "servers' answers or waited out rambling ones)"}


def _table(start: Path) -> tuple[dict, str]:
    path = find_pyproject(start.resolve())
    if path is None:
        return {}, ""
    try:
        data = tomllib.loads(path.read_text()).get("tool", {}).get("tern", {}).get("llm", {})
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: [tool.tern.llm] must be a table")
    renamed = sorted(set(data) & set(_RENAMED))
    if renamed:
        raise ConfigError(f"{path}: [tool.tern.llm] {renamed[0]} is now {_RENAMED[renamed[0]]}")
    unknown = set(data) - {"model", "base_url", "api_key_env", *_NUMBERS}
    if unknown:
        raise ConfigError(f"{path}: [tool.tern.llm]: unknown keys {', '.join(sorted(unknown))}")
    return data, str(path)


def load_llm_config(start: Path, env: Mapping[str, str] | None = None, **overrides: object) -> LLMConfig | None:
    """The configured LLM, or None when no model is named anywhere (rules only).

    Raises ConfigError for a malformed table or value: a typo must not silently mean
    "no LLM"."""
    env = os.environ if env is None else env
    table, source = _table(start)
    model = overrides.get("model") or env.get(MODEL_ENV) or table.get("model")
    if not model:
        return None
    key_env = str(table.get("api_key_env", "OPENAI_API_KEY"))
    base_url = overrides.get("base_url") or env.get("OPENAI_BASE_URL") or table.get("base_url")
    api_key = env.get(key_env) or env.get("OPENAI_API_KEY") or ""
    if not api_key and not base_url:
        raise ConfigError(f"LLM model {model!r} is set but neither a base URL nor an API key (${key_env}) is")
    values: dict[str, object] = {}
    for name, kind in _NUMBERS.items():
        raw = overrides.get(name) if overrides.get(name) is not None else table.get(name)
        if raw is None:
            continue
        try:
            values[name] = kind(raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"[tool.tern.llm] {name} = {raw!r}: not a {kind.__name__}") from exc
        if name != "temperature" and values[name] < (0 if name == "max_retries" else 1):  # type: ignore[operator]
            raise ConfigError(f"[tool.tern.llm] {name} = {raw!r}: out of range")
    origin = "flags" if overrides.get("model") else MODEL_ENV if env.get(MODEL_ENV) else source
    config = LLMConfig(model=str(model), base_url=str(base_url) if base_url else None,
                       api_key=api_key or "not-needed", source=origin)
    return replace(config, **values)  # type: ignore[arg-type]


NOT_CONFIGURED = (f"rules only: no LLM configured (set {MODEL_ENV} and OPENAI_BASE_URL or OPENAI_API_KEY, "
                  "or [tool.tern.llm] in pyproject.toml)")
