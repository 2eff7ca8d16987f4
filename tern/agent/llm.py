"""The model behind one small interface: messages in, a completion or a failure out.

``OpenAIChat`` streams each answer through the ``openai`` async client and stops reading
once the caller has what it needs (``streaming.py``). It retries, itself, only what
failed before any of the answer arrived (no connection, 429, 5xx), with backoff that
honours ``Retry-After`` and with its request slot given back while it waits
(``pacing.py``); an answer that was arriving is never asked for again behind the caller's
back. Every request's tokens are counted, answered or not: from the server's usage when
it sent one, else as ``tokens.py`` estimates. Completions are cached by model, sampling
settings, the answer's size and the exact messages, in the one SQLite store of
``.tern/``: a rerun or an eval of the same prompts costs nothing and gives the same
answers. Failures are values (never cached), so one bad request is one unit's outcome,
not a crashed run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Protocol

import anyio

from tern.agent.config import LLMConfig
from tern.agent.pacing import Pacing, Signals, probe_slots
from tern.agent.streaming import Streamed, read_answer
from tern.agent.tokens import Usage, answer_tokens, prompt_tokens
from tern.verify.cache import Cache
from tern.verify.keys import digest

#: the longest wait between retries tern accepts from a server's Retry-After
MAX_RETRY_AFTER = 60.0
RETRIED_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
#: failures that say the server has more requests than it serves, as pacing is told them
OVERLOAD = {"rate_limit": "the server refused a request (429)", "busy": "the server refused a request (503)",
            "timeout": "no first token within the limit", "interrupted": "the server cut an answer short for another request"}


@dataclass(frozen=True)
class Completion:
    text: str
    usage: Usage = Usage()
    cached: bool = False
    #: end (the server finished) | size (cut at the allowance) | what the caller's stop_when
    #: said: block (the code block was complete), doomed, looping
    stop: str = "end"
    first_token: float | None = None

    @property
    def tokens(self) -> int:
        """Tokens this answer cost now: a cached answer costs none."""
        return 0 if self.cached else self.usage.total


@dataclass(frozen=True)
class LLMFailure:
    #: timeout (no first token in time) | stalled (tokens stopped coming) | dropped (the
    #: connection broke mid-answer) | interrupted (the server ended the answer early) |
    #: rate_limit | busy (503) | connection | http | empty | budget
    cause: str
    message: str
    usage: Usage = Usage()  # what the requests cost anyway: a timed-out prompt is still processed
    retryable: bool = False
    retry_after: float | None = None

    @property
    def tokens(self) -> int:
        return self.usage.total


class ChatModel(Protocol):
    name: str

    async def complete(self, messages: list[dict], *, max_tokens: int | None = None,
                       stop_when: Callable[[str], str] | None = None,
                       admit: Callable[[], bool] | None = None) -> Completion | LLMFailure:
        """``max_tokens``: the most this answer needs (capped by the configuration);
        ``stop_when``: why reading can stop at the text so far ("": read on); ``admit``: asked once a
        request slot is free, False ends the request unsent (``budget``); its retries are
        not asked again."""
        ...


class OpenAIChat:
    def __init__(self, config: LLMConfig, cache: Cache | None = None, pacing: Pacing | None = None):
        import openai

        self.name = config.model
        self.config = config
        self.cache = cache
        self.pacing = pacing or Pacing(config.llm_concurrency)
        self.slots_asked = False
        self._slots_lock = anyio.Lock()
        # retries are tern's (only before an answer began); the deadlines are read_answer's
        self.client = openai.AsyncOpenAI(base_url=config.base_url, api_key=config.api_key, max_retries=0,
                                         timeout=openai.Timeout(None, connect=min(10.0, config.first_token_timeout)))

    def key(self, messages: list[dict], max_tokens: int) -> str:
        c = self.config
        return digest("llm", c.model, c.base_url or "", c.temperature, max_tokens, messages)

    async def complete(self, messages: list[dict], *, max_tokens: int | None = None,
                       stop_when: Callable[[str], str] | None = None,
                       admit: Callable[[], bool] | None = None) -> Completion | LLMFailure:
        size = min(max_tokens or self.config.max_tokens, self.config.max_tokens)
        key = self.key(messages, size)
        hit = self.cache.get(key, "llm") if self.cache else None
        if hit is not None:
            return Completion(hit["text"], Usage(hit["prompt_tokens"], hit["completion_tokens"]), cached=True,
                              stop=hit.get("stop", "end"))
        if not self.slots_asked:
            await self._ask_slots()
        spent = Usage()
        for retry in range(self.config.max_retries + 1):
            async with self.pacing:
                if retry == 0 and admit is not None and not admit():  # a retry follows a refusal, which cost nothing
                    return LLMFailure("budget", "the token budget is spent")
                result = await self._once(messages, size, stop_when)
            self.pacing.observe(_signals(result, prompt_tokens(messages)))
            spent += result.usage
            if isinstance(result, Completion) or not result.retryable or retry == self.config.max_retries:
                break
            await anyio.sleep(_backoff(retry, result.retry_after))
        if isinstance(result, LLMFailure):
            if result.retryable and self.config.max_retries:
                return LLMFailure(result.cause, f"{result.message} ({self.config.max_retries} retries)", spent)
            return LLMFailure(result.cause, result.message, spent)
        completion = Completion(result.text, spent, stop=result.stop, first_token=result.first_token)
        if self.cache is not None:
            self.cache.put(key, "llm", {"text": completion.text, "prompt_tokens": result.usage.prompt,
                                        "completion_tokens": result.usage.completion, "stop": completion.stop,
                                        "model": self.config.model})
        return completion

    async def _ask_slots(self) -> None:
        """Once, before the first request that is not in the cache (every request waits for
        it): a local llama.cpp server says how many requests it serves at once."""
        async with self._slots_lock:
            if not self.slots_asked:
                slots = await probe_slots(self.config.base_url)
                if slots is not None:
                    self.pacing.match_slots(slots)
                self.slots_asked = True

    async def _once(self, messages: list[dict], size: int,
                    stop_when: Callable[[str], str] | None) -> Completion | LLMFailure:
        """One request, streamed: its answer, or why there is none and what it cost."""
        import openai

        c = self.config

        def send():
            return self.client.chat.completions.create(
                model=c.model, messages=messages, temperature=c.temperature, max_tokens=size, stream=True,
                stream_options={"include_usage": True})
        try:
            streamed = await read_answer(send, first_token_timeout=c.first_token_timeout, idle_timeout=c.idle_timeout,
                                         max_tokens=size, stop_when=stop_when)
        except openai.APIStatusError as exc:
            status = exc.status_code
            cause = "rate_limit" if status == 429 else "busy" if status == 503 else "http"
            return LLMFailure(cause, f"HTTP {status}: {_short(exc)}", retryable=status in RETRIED_STATUSES,
                              retry_after=_retry_after(exc.response.headers))
        except openai.APIConnectionError as exc:
            return LLMFailure("connection", f"cannot reach {c.base_url or 'the API'}: {_short(exc)}", retryable=True)
        except openai.APIError as exc:  # a body the client cannot read as a stream
            return LLMFailure("http", f"unreadable answer: {_short(exc)}")
        usage = streamed.reported or Usage(prompt_tokens(messages), answer_tokens(streamed.chunks, len(streamed.text)), counted=True)
        return _judge(streamed, usage)

    async def close(self) -> None:
        await self.client.close()


def _judge(streamed: Streamed, usage: Usage) -> Completion | LLMFailure:
    if streamed.stop == "first_token_timeout":
        return LLMFailure("timeout", streamed.detail, usage)  # the queue, or the server, is too slow: not retried here
    if streamed.stop == "idle_timeout":
        return LLMFailure("stalled", streamed.detail, usage)
    if streamed.stop == "cut":
        return LLMFailure("interrupted", f"{streamed.detail} (llama-cpp-python's server does this when another request "
                                         "waits: fewer requests at once avoid it)", usage)
    if streamed.stop == "dropped":
        return LLMFailure("dropped" if streamed.began else "connection", streamed.detail, usage, retryable=not streamed.began)
    if not streamed.text.strip():
        return LLMFailure("empty", "the answer had no content", usage)
    return Completion(streamed.text, usage, stop=streamed.stop, first_token=streamed.first_token)


def _signals(result: Completion | LLMFailure, prompt: int) -> Signals:
    if isinstance(result, Completion):
        return Signals(first_token=result.first_token, prompt_tokens=prompt)
    return Signals(prompt_tokens=prompt, overload=OVERLOAD.get(result.cause, ""))


def _backoff(retry: int, retry_after: float | None) -> float:
    if retry_after is not None:
        return min(retry_after, MAX_RETRY_AFTER)
    return min(8.0, 0.5 * 2 ** retry) * random.uniform(0.75, 1.0)


def _retry_after(headers) -> float | None:
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(headers.get(name)) * scale
        except (TypeError, ValueError):
            continue
    return None


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]
