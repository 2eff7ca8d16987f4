"""``tern rules suggest``: candidate deterministic rules from what the LLM solved.

Every accepted unit is journaled with the TODOs the rules left in it, its rule-translated
code and the accepted code. A TODO names the construct the rules could not translate
(``tf.unique``); the JAX symbols the accepted code uses that the rule translation did not
are how the LLM solved it. When the same construct was solved with the same symbols in
several units, that pairing is a candidate ``[[api]]`` record, listed with the cases
that support it so a person can write the rule and its golden cases from them.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

_DOTTED = re.compile(r"\b(?:jnp|jax|nn|optax|np|lax)(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
TARGET_ROOTS = ("jnp", "jax", "nn", "optax", "np", "lax")


@dataclass
class Suggestion:
    construct: str
    support: int  # accepted units that needed it
    targets: list[tuple[str, int]]  # JAX symbols the LLM introduced, with how many units used each
    cases: list[str] = field(default_factory=list)  # package/file::unit (model)
    examples: list[tuple[str, str]] = field(default_factory=list)  # (original line, accepted line)


def _construct(reason: str) -> str | None:
    head = reason.split(":", 1)[0].strip()
    if not head or head.startswith(("import ", "class ", "def ", "llm")):
        return None
    return head


def suggest(entries: list[dict], min_support: int = 2) -> list[Suggestion]:
    by_construct: dict[str, list[dict]] = defaultdict(list)
    for entry in entries:
        for construct in dict.fromkeys(c for c in map(_construct, entry.get("reasons", [])) if c):
            by_construct[construct].append(entry)
    found = []
    for construct, group in by_construct.items():
        if len(group) < min_support:
            continue
        counts: Counter[str] = Counter()
        for entry in group:
            counts.update(set(_DOTTED.findall(entry["code"])) - set(_DOTTED.findall(entry.get("before", ""))))
        targets = [(name, n) for name, n in counts.most_common() if n >= min_support][:5]
        suggestion = Suggestion(construct, len(group), targets,
                                cases=[f"{e['package']}/{e['file']}::{e['name']} ({e['model']})" for e in group])
        short = construct.split(".")[-1]
        for entry in group[:3]:
            before = next((line.strip() for line in entry.get("original", "").splitlines() if short in line), "")
            after = next((line.strip() for line in entry["code"].splitlines()
                          if targets and targets[0][0] in line), "")
            if before or after:
                suggestion.examples.append((before, after))
        found.append(suggestion)
    return sorted(found, key=lambda s: (-s.support, s.construct))
