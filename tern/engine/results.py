"""Values the engine's parts hand each other: a refusal, a node's code, a value table's name.

The bottom of the engine: every other module may import it, it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst


@dataclass(frozen=True)
class Refusal:
    """Why a rule or converter will not translate something: the code is then left as written,
    with a TODO giving this reason."""

    reason: str


def code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def value_table_name(kind: str) -> str:
    """The module-level table a translation looks values of ``kind`` up in at run time."""
    return f"_TERN_{kind.upper()}S"
