"""What a comparison found (``Status``) and what an eval case is worth (``Grade``).

Both are ``StrEnum``: a member is its old string, so JSON, Markdown, HTML and PR bodies
show the bare value, and a status read back from JSON compares equal to its member
(``row["status"] == Status.EQUIVALENT``). Each member carries its order and its look on
one line: a new status is one line here.

Imports nothing from tern: every layer may use it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class Status(enum.StrEnum):
    """A comparison's outcome, for a module row, a replayed call or a training session.

    Members are listed in the order reports count module statuses. ``severity``: lower
    is worse; "the worst" of several statuses is the one with the lowest. ``style``: its
    rich colour. ``module``: a module row can end with it (``report.ModuleRow.settle``),
    so reports count it.
    """

    severity: int
    style: str
    module: bool

    def __new__(cls, value: str, severity: int, style: str, module: bool) -> Status:
        member = str.__new__(cls, value)
        member._value_ = value
        member.severity, member.style, member.module = severity, style, module
        return member

    #: all compared agrees (a module, a training session, a weights port)
    EQUIVALENT = "equivalent", 2, "green", True
    #: a compared value or a translated test differs beyond tolerance
    MISMATCH = "mismatch", 0, "red", True
    #: nothing was compared: never reported as a pass
    UNTESTED = "untested", 3, "yellow", True
    #: it could not be run or compared (an import, a crashed job, a step that cannot run)
    ERROR = "error", 1, "red", True
    #: a training session with no honest comparison (a reason says why)
    NOT_COMPARED = "not compared", 4, "yellow", False
    #: a replayed call whose outputs and gradients agree (a module's is "equivalent")
    MATCH = "match", 2, "green", False

    @classmethod
    def of_modules(cls) -> tuple[Status, ...]:
        """The statuses a module row can have, in the order reports count them."""
        return tuple(s for s in cls if s.module)

    @classmethod
    def failing_modules(cls) -> tuple[Status, ...]:
        """The module statuses worse than a pass, worst first."""
        return tuple(sorted((s for s in cls.of_modules() if s.failing), key=lambda s: s.severity))

    @classmethod
    def worst(cls, statuses: Iterable[str], default: Status | str = "n/a") -> Status | str:
        """The most severe of ``statuses`` (strings that are no status are ignored), or
        ``default`` when there is none."""
        found = [cls(s) for s in statuses if s in cls._value2member_map_]
        return min(found, key=lambda s: s.severity) if found else default

    @property
    def failing(self) -> bool:
        """Worse than a pass: a mismatch or an error."""
        return self.severity < Status.EQUIVALENT.severity


class Grade(enum.StrEnum):
    """An eval case's status (``evaluation/score.py``), best first: ``rank`` 0 is best.

    ``credit``: its share of the weighted score; ``style``: its rich colour; ``icon``: its
    mark in Markdown; ``color``: its colour in the HTML report.
    """

    credit: float
    style: str
    icon: str
    color: str

    def __new__(cls, value: str, credit: float, style: str, icon: str, color: str) -> Grade:
        member = str.__new__(cls, value)
        member._value_ = value
        member.credit, member.style, member.icon, member.color = credit, style, icon, color
        return member

    VERIFIED = "verified", 1.0, "green", "✅", "#2e7d32"
    PARTIALLY_VERIFIED = "partially verified", 0.5, "yellow", "🟡", "#f9a825"
    UNVERIFIED = "unverified", 0.0, "magenta", "⚪", "#8e8e8e"
    FAILED = "failed", 0.0, "red", "❌", "#c62828"

    @property
    def rank(self) -> int:
        return list(Grade).index(self)

    @classmethod
    def get(cls, value: str) -> Grade | None:
        """The grade named ``value``, None for any other string (an older report's)."""
        return cls._value2member_map_.get(value)  # type: ignore[return-value]
