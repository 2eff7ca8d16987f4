"""Token counts tern works out itself: how long an answer may be, and what a request cost
when the server did not say (an answer cut short, a timeout, a server without usage).

The rule, stated once: a prompt costs a token per 3.5 characters (what code and Tern's
prompts come to with common tokenizers; prose is nearer 4); an answer
costs the chunks that carried text (servers stream about one token a chunk), or a
quarter of its characters when that is more (a server that sends several tokens a
chunk). Tokens a server generated after the client hung up are never seen, so a cut
answer is counted up to where it was cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

PROMPT_CHARS_PER_TOKEN = 3.5
ANSWER_CHARS_PER_TOKEN = 4
#: an answer may be this many times the unit, plus room for its imports and a sentence
ANSWER_FACTOR = 2
ANSWER_ROOM = 256


@dataclass(frozen=True)
class Usage:
    """Tokens one request (or several) cost; ``counted`` when tern estimated any of them."""
    prompt: int = 0
    completion: int = 0
    counted: bool = False

    @property
    def total(self) -> int:
        return self.prompt + self.completion

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(self.prompt + other.prompt, self.completion + other.completion, self.counted or other.counted)


def prompt_tokens(messages: list[dict]) -> int:
    return ceil(sum(len(str(m.get("content", ""))) for m in messages) / PROMPT_CHARS_PER_TOKEN)


def answer_tokens(chunks: int, chars: int) -> int:
    return max(chunks, ceil(chars / ANSWER_CHARS_PER_TOKEN))


def answer_allowance(unit_source: str) -> int:
    """How many tokens an answer for this unit may take: a translation is rarely more
    than twice the source, and a model that has not closed its code block by then is
    rambling (a small local model may never stop by itself)."""
    return ANSWER_ROOM + ANSWER_FACTOR * ceil(len(unit_source) / PROMPT_CHARS_PER_TOKEN)
