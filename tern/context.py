"""Per-file translation context: what rules can ask and tell while a file is rewritten."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from tern.convert import Refusal
from tern.names import Scopes
from tern.package import PackageInfo
from tern.records import Tables
from tern.render import code
from tern.report import Edit, Todo
from tern.targets import ImportPlan, respell

# Flax RNG stream used for randomness that is not dropout (sampling layers, noise).
NOISE_STREAM = "noise"


@dataclass
class LayerRef:
    """What a name or ``self.attr`` holds: a table layer, a package module, a Sequential."""

    record: object | None = None  # LayerRecord
    package_class: str | None = None
    sequential: bool = False


@dataclass
class FunctionFrame:
    name: str
    in_module_method: bool = False
    training: str | None = None  # name of the training flag in scope, if any
    layers: dict[str, LayerRef] = field(default_factory=dict)
    tags: set[str] = field(default_factory=set)


@dataclass
class FileContext:
    tables: Tables
    package: PackageInfo
    scopes: Scopes
    plan: ImportPlan
    is_test: bool
    edits: list[Edit] = field(default_factory=list)
    pending: list[Todo] = field(default_factory=list)
    frames: list[FunctionFrame] = field(default_factory=list)
    classes: list[object] = field(default_factory=list)  # KerasClass | None per class level
    rng_counter: int = 0
    #: id(original constructor call) -> Stateless, so a later call can inline the apply
    stateless: dict[int, object] = field(default_factory=dict)
    #: per-file state of programmatic rules (rules themselves are shared singletons)
    rule_state: dict[str, object] = field(default_factory=dict)

    # -- asked by rules and converters -------------------------------------------------
    def resolve(self, node: cst.BaseExpression) -> str | None:
        return self.scopes.resolve(node)

    def target_expr(self, text: str) -> cst.BaseExpression:
        return respell(cst.parse_expression(text), self.plan)

    def target_name(self, dotted: str) -> cst.BaseExpression:
        return self.plan.spell_node(dotted)

    def value_target(self, kind: str, source: str) -> str | None:
        record = self.tables.value(kind, source)
        if record is not None:
            return record.target
        if kind == "dtype":
            api = self.tables.api.get(source)
            if api is not None and api.is_name:
                return api.target
            if "." not in source:
                return f"jax.numpy.{source}"
        return None

    @property
    def frame(self) -> FunctionFrame | None:
        return self.frames[-1] if self.frames else None

    @property
    def keras_class(self):
        return self.classes[-1] if self.classes else None

    def rng_key(self) -> cst.BaseExpression | Refusal:
        """An explicit PRNG key where the context has one to give."""
        if self.is_test:
            self.rng_counter += 1
            return self.target_expr(f"jax.random.key({self.rng_counter})")
        frame = self.frame
        if frame is not None and frame.in_module_method:
            return cst.parse_expression(f'self.make_rng("{NOISE_STREAM}")')
        return Refusal(
            "JAX needs an explicit PRNG key here; add a `key` argument to this function "
            "and thread it from the caller"
        )

    # -- told by rules -----------------------------------------------------------------
    def edit(self, rule: str, before: cst.CSTNode, after: cst.CSTNode) -> None:
        self.edits.append(Edit(rule, _short(before), _short(after)))

    def todo(self, construct: str, reason: str) -> None:
        todo = Todo(construct, reason)
        if todo not in self.pending:
            self.pending.append(todo)


def _short(node: cst.CSTNode) -> str:
    text = " ".join(code(node).split())
    return text if len(text) <= 120 else text[:117] + "..."
