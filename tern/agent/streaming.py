"""Reading one streamed answer: stop as soon as it holds what is needed, and never wait
past the limits.

A local model may never stop by itself, and a queued request may wait minutes for its
first token: one total timeout either cuts the good answers of a slow server or waits
out a rambling one. So there are two limits, the time to the first token (the queue and
the prompt) and the time between tokens (a stalled server), and two reasons to stop
early: the caller has read enough (``stop_when``: the code block is complete, or can no
longer pass), or the answer has run past the tokens allowed (for servers that ignore
``max_tokens``). Stopping closes the
response, and with it the connection: that is how a server learns to stop generating.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import anyio

from tern.agent.tokens import Usage, answer_tokens

#: how far past ``max_tokens`` (which the server should enforce) tern keeps reading
OVERRUN = 1.25


@dataclass(frozen=True)
class Streamed:
    text: str
    chunks: int  # chunks that carried text (answer or reasoning)
    reported: Usage | None  # the server's own count: only a stream read to its end has it
    first_token: float | None  # seconds from sending the request to the first token
    #: end (the server finished) | what ``stop_when`` said (block, doomed, looping) | size (past the
    #: allowance) | cut (the stream ended with no finish reason: llama-cpp-python's server
    #: ends a stream so when another request waits) | first_token_timeout | idle_timeout
    #: | dropped (the connection broke)
    stop: str
    detail: str = ""

    @property
    def began(self) -> bool:
        return self.chunks > 0


async def read_answer(open_stream: Callable[[], Awaitable[Any]], *, first_token_timeout: float, idle_timeout: float,
                      max_tokens: int, stop_when: Callable[[str], str] | None = None) -> Streamed:
    """``open_stream`` sends the request and returns the ``openai`` stream; errors before
    the stream exists (refusals, no connection) are the caller's to map. Everything after
    is a value. ``stop_when(text)`` names why reading can stop, or says "" to read on."""
    import openai

    started = anyio.current_time()
    deadline = started + first_token_timeout
    parts: list[str] = []
    chunks, chars, reported, first, stream, finish = 0, 0, None, None, None, None
    stop, detail = "end", ""
    try:
        stream = await _by(deadline, open_stream())
        while True:
            try:
                chunk = await _by(deadline, anext(stream))
            except StopAsyncIteration:
                break
            if getattr(chunk, "usage", None) is not None:
                reported = Usage(chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
            finish = _finish_reason(chunk) or finish
            piece, thought = _delta(chunk)
            if not (piece or thought):
                continue
            chunks, chars = chunks + 1, chars + len(piece)
            now = anyio.current_time()
            first = now - started if first is None else first
            deadline = now + idle_timeout
            parts.append(piece)
            if stop_when is not None and ("`" in piece or "\n" in piece):
                stop = stop_when("".join(parts)) or "end"
                if stop != "end":
                    break
            if answer_tokens(chunks, chars) > OVERRUN * max_tokens:
                stop, detail = "size", f"past {max_tokens} tokens"
                break
        if stop == "end" and finish is None:
            stop, detail = "cut", f"the server ended the answer after {chunks} chunk(s) without a finish reason"
    except TimeoutError:
        if first is None:
            stop, detail = "first_token_timeout", f"no first token within {first_token_timeout:g} s"
        else:
            stop, detail = "idle_timeout", f"no token for {idle_timeout:g} s after {chunks} chunk(s)"
    except openai.APIError as exc:
        if stream is None:
            raise
        stop, detail = "dropped", f"the connection broke after {chunks} chunk(s): {' '.join(str(exc).split())[:200]}"
    finally:
        if stream is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await stream.close()  # mid-answer this closes the connection: the server stops generating
    return Streamed("".join(parts), chunks, reported if stop == "end" else None, first, stop, detail)


async def _by(deadline: float, awaitable: Awaitable[Any]) -> Any:
    with anyio.fail_after(max(deadline - anyio.current_time(), 0)):
        return await awaitable


def _finish_reason(chunk: Any) -> str | None:
    return chunk.choices[0].finish_reason if getattr(chunk, "choices", None) else None


def _delta(chunk: Any) -> tuple[str, str]:
    """The answer text and the reasoning text (vLLM's ``reasoning_content``, Ollama's
    ``reasoning``) one chunk carries: reasoning costs tokens and shows the server is alive."""
    if not getattr(chunk, "choices", None):
        return "", ""
    delta = chunk.choices[0].delta
    if delta is None:
        return "", ""
    thought = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None) or ""
    return delta.content or "", thought if isinstance(thought, str) else ""
