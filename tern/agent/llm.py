"""The model behind one small interface: messages in, a completion or a failure out.

``OpenAIChat`` uses the ``openai`` package's async client, which retries 408/409/429/5xx,
timeouts and connection errors with exponential backoff (honouring ``Retry-After``).
Completions are cached by model, sampling settings and the exact messages, in the one
SQLite store of ``.tern/``: a rerun or an eval of the same prompts costs nothing and gives
the same answers. Failures are values (never cached), so one bad request is one unit's
outcome, not a crashed run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tern.agent.config import LLMConfig
from tern.verify.cache import Cache
from tern.verify.keys import digest


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False

    @property
    def tokens(self) -> int:
        """Tokens this answer cost now: a cached answer costs none."""
        return 0 if self.cached else self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class LLMFailure:
    cause: str  # timeout | rate_limit | connection | http | empty
    message: str
    tokens: int = 0  # an empty answer is still paid for


class ChatModel(Protocol):
    name: str

    async def complete(self, messages: list[dict]) -> Completion | LLMFailure: ...


class OpenAIChat:
    def __init__(self, config: LLMConfig, cache: Cache | None = None):
        from openai import AsyncOpenAI

        self.name = config.model
        self.config = config
        self.cache = cache
        self.client = AsyncOpenAI(base_url=config.base_url, api_key=config.api_key, timeout=config.timeout,
                                  max_retries=config.max_retries)

    def key(self, messages: list[dict]) -> str:
        c = self.config
        return digest("llm", c.model, c.base_url or "", c.temperature, c.max_tokens, messages)

    async def complete(self, messages: list[dict]) -> Completion | LLMFailure:
        import openai

        key = self.key(messages)
        hit = self.cache.get(key, "llm") if self.cache else None
        if hit is not None:
            return Completion(hit["text"], hit["prompt_tokens"], hit["completion_tokens"], cached=True)
        try:
            response = await self.client.chat.completions.create(
                model=self.config.model, messages=messages, temperature=self.config.temperature,
                max_tokens=self.config.max_tokens)
        except openai.APITimeoutError:
            return LLMFailure("timeout", f"no answer within {self.config.timeout:g} s ({self.config.max_retries} retries)")
        except openai.RateLimitError as exc:
            return LLMFailure("rate_limit", f"429 after {self.config.max_retries} retries: {_short(exc)}")
        except openai.APIConnectionError as exc:
            return LLMFailure("connection", f"cannot reach {self.config.base_url or 'the API'}: {_short(exc)}")
        except openai.APIStatusError as exc:
            return LLMFailure("http", f"HTTP {exc.status_code}: {_short(exc)}")
        except openai.APIError as exc:  # a body the client cannot read as a completion
            return LLMFailure("http", f"unreadable answer: {_short(exc)}")
        choice = response.choices[0] if response.choices else None
        text = (choice.message.content if choice and choice.message else None) or ""
        usage = response.usage
        completion = Completion(text, getattr(usage, "prompt_tokens", 0) or 0, getattr(usage, "completion_tokens", 0) or 0)
        if not text.strip():
            return LLMFailure("empty", "the answer had no content", completion.tokens)
        if self.cache is not None:
            self.cache.put(key, "llm", {"text": text, "prompt_tokens": completion.prompt_tokens,
                                        "completion_tokens": completion.completion_tokens, "model": self.config.model})
        return completion

    async def close(self) -> None:
        await self.client.close()


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]
