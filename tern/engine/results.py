"""Values the engine's parts hand each other: a refusal, a node's code, a value table's name.

The bottom of the engine: every other module may import it, it imports none of them but
``codegen`` (LibCST's codegen, faster).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import libcst as cst
from libcst.metadata.position_provider import CodegenState

from tern.engine.codegen import emit


@dataclass(frozen=True)
class Refusal:
    """Why a rule or converter will not translate something: the code is then left as written,
    with a TODO giving this reason."""

    reason: str


class _Unrecorded(CodegenState):
    """LibCST's codegen state, its ``record_syntactic_position`` (entered around most nodes, a
    generator-based context manager that only yields) replaced by one that does nothing at less
    cost: a third of codegen time went to it. The tokens are the same."""

    def record_syntactic_position(self, node, *, start_node=None, end_node=None):
        return _NOTHING


_NOTHING = contextlib.nullcontext()
_NO_MODULE = cst.Module([])


def code(node: cst.CSTNode, module: cst.Module | None = None) -> str:
    """``(module or Module([])).code_for_node(node)``: the node's code, with the module's
    indentation and newlines (``code(module, module)`` is ``module.code``)."""
    within = _NO_MODULE if module is None else module
    state = _Unrecorded(default_indent=within.default_indent, default_newline=within.default_newline)
    emit(node, state)
    return "".join(state.tokens)


class _Enough(Exception):
    """Raised by ``_Prefix`` once it holds enough of a node's code."""


class _Prefix(_Unrecorded):
    """A codegen state that stops the codegen once its tokens hold ``bound`` characters that
    are not whitespace-only tokens."""

    def __init__(self, bound: int, **kwargs):
        super().__init__(**kwargs)
        self._left = bound

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        if not value.isspace():
            self._left -= len(value)
            if self._left < 0:
                raise _Enough


def short_code(node: cst.CSTNode, limit: int = 120) -> str:
    """The node's code on one line (whitespace runs as one space), cut to ``limit`` characters
    with ``...``: what a report shows of an edit. Only as much code is generated as the cut
    needs; an edit may be a whole class."""
    state = _Prefix(limit + 8, default_indent=_NO_MODULE.default_indent, default_newline=_NO_MODULE.default_newline)
    try:
        emit(node, state)
        text = " ".join("".join(state.tokens).split())
    except _Enough:
        text = " ".join("".join(state.tokens).split())
        if len(text) <= limit:  # whitespace inside tokens (strings, comments) counted: all of it, then
            text = " ".join(code(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def module_code(module: cst.Module) -> str:
    """``module.code``."""
    return code(module, module)


class ModuleTexts:
    """``module.code`` for successive versions of one file's module, each top-level statement
    generated once: the engine's last steps (imports settled, the support import added) each
    read the whole text, and each changes a statement or two of hundreds."""

    def __init__(self) -> None:
        self._tokens: dict[tuple[int, str, str], tuple[cst.CSTNode, list[str]]] = {}  # the node held: its id stays its own

    def code(self, module: cst.Module) -> str:
        tokens: list[str] = []
        for part in (*module.header, *module.body, *module.footer):
            tokens += self._of(part, module)
        if module.has_trailing_newline:
            if not tokens:
                tokens.append(module.default_newline)
        elif tokens and tokens[-1] == module.default_newline:  # CodegenState.pop_trailing_newline
            tokens.pop()
        return "".join(tokens)

    def _of(self, node: cst.CSTNode, module: cst.Module) -> list[str]:
        key = (id(node), module.default_indent, module.default_newline)
        done = self._tokens.get(key)
        if done is None:
            state = _Unrecorded(default_indent=module.default_indent, default_newline=module.default_newline)
            emit(node, state)
            done = self._tokens[key] = (node, state.tokens)
        return done[1]


def value_table_name(kind: str) -> str:
    """The module-level table a translation looks values of ``kind`` up in at run time."""
    return f"_TERN_{kind.upper()}S"
