"""How many requests the LLM server gets at once: the configured number at first, fewer
once they queue.

A local server (llama.cpp, Ollama) often answers one request at a time: four requests
sent at once wait in its queue, each first token later by whole answers, until they time
out. The signs that requests queue: the server says how many it serves at once
(llama.cpp's ``/props`` ``total_slots``, asked once, on loopback only); it refuses with
503 or 429; it cuts a streamed answer short for a waiting request (llama-cpp-python's
server does); no first token comes within the limit; or a first token comes far later
than the prompt's size explains. Each sign halves the limit, never below one, for the
rest of the run: growing it back would flood a serial server again.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio

#: a first token this many times slower than the fastest seen (per prompt token), and
#: this many seconds later, waited behind other requests
QUEUE_FACTOR = 3.0
QUEUE_SLACK = 5.0


@dataclass(frozen=True)
class Signals:
    """What one request showed about the server's load."""
    first_token: float | None = None  # seconds from sending the request to the first token
    prompt_tokens: int = 0
    overload: str = ""  # how the request showed the server has more than it serves: refused, cut short, timed out


class Pacing:
    """A concurrency limit that backs off; ``async with pacing:`` holds one request slot."""

    def __init__(self, limit: int):
        self.configured = limit
        self.limiter = anyio.CapacityLimiter(limit)
        self.fastest: float | None = None  # seconds per prompt token of the quickest first token
        self.changes: list[str] = []

    @property
    def limit(self) -> int:
        return int(self.limiter.total_tokens)

    async def __aenter__(self) -> None:
        await self.limiter.acquire()

    async def __aexit__(self, *exc) -> None:
        self.limiter.release()

    def match_slots(self, slots: int) -> None:
        """The server serves ``slots`` requests at once: more would only wait in its queue."""
        if 1 <= slots < self.limit:
            self._set(slots, f"the server has {slots} slot(s)")

    def observe(self, signals: Signals) -> None:
        if signals.overload:
            self._halve(signals.overload)
        if signals.first_token is None:
            return
        rate = signals.first_token / max(signals.prompt_tokens, 1)
        if self.fastest is not None:
            expected = self.fastest * max(signals.prompt_tokens, 1)
            if signals.first_token > QUEUE_FACTOR * expected + QUEUE_SLACK:
                self._halve(f"first token after {signals.first_token:.1f} s where {expected:.1f} s was expected")
        self.fastest = rate if self.fastest is None else min(self.fastest, rate)

    def summary(self) -> dict:
        return {"configured": self.configured, "final": self.limit, "changes": list(self.changes)}

    def _halve(self, why: str) -> None:
        if self.limit > 1:
            self._set(max(1, self.limit // 2), why)

    def _set(self, limit: int, why: str) -> None:
        self.changes.append(f"{self.limit} -> {limit}: {why}")
        self.limiter.total_tokens = limit


async def probe_slots(base_url: str | None, timeout: float = 2.0) -> int | None:
    """How many requests a llama.cpp server on this machine serves at once (its ``/props``),
    or None: not loopback, not llama.cpp, or no answer in time. Never raises."""
    if not base_url or not _loopback(base_url):
        return None
    import httpx2

    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        async with httpx2.AsyncClient(timeout=timeout, trust_env=False) as client:
            response = await client.get(f"{root}/props")
        slots = response.json().get("total_slots") if response.status_code == 200 else None
    except Exception:  # whatever else answers there, or nothing: no slot count
        return None
    return slots if isinstance(slots, int) and slots >= 1 else None


def _loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
