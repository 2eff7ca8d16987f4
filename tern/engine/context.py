"""Per-file translation context: what rules can ask and tell while a file is rewritten."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import TypeVar

import libcst as cst

from tern.engine.features import features
from tern.engine.names import Scopes, may_name
from tern.engine.package import PackageInfo
from tern.engine.records import Tables
from tern.engine.report import Edit, Note, Todo
from tern.engine.results import Refusal, short_code, value_table_name
from tern.engine.targets import ImportPlan, respell
from tern.engine.templates import RNG_KEYS

T = TypeVar("T")

# Flax RNG stream used for randomness that is not dropout (sampling layers, noise).
NOISE_STREAM = RNG_KEYS["key"]
#: dtype strings tf.as_dtype reads as another name
DTYPE_STRING_ALIASES = {"float": "float32", "double": "float64", "half": "float16"}


@dataclass
class LayerRef:
    """What a name or ``self.attr`` holds: a table layer, a package module, a Sequential."""

    record: object | None = None  # LayerRecord
    package_class: str | None = None
    sequential: bool = False
    many: bool = False  # a list of such layers (``self.blocks = [Block() for ...]``)
    built: object | None = None  # the original constructor call (cst.Call) of a table layer


@dataclass
class FunctionFrame:
    name: str
    in_module_method: bool = False
    training: str | None = None  # name of the training flag in scope, if any
    layers: dict[str, LayerRef] = field(default_factory=dict)
    tags: set[str] = field(default_factory=set)
    # where a tf.random draw stands, for the key it takes (``FileContext.rng_key``): loops and
    # tapes by source-order index, as tern/features/training/train_steps.py counts them on the ast
    loops_seen: int = 0
    loops: list[int] = field(default_factory=list)
    tapes_seen: int = 0
    tapes: list[int] = field(default_factory=list)
    repeated: int = 0  # lambdas and comprehensions around the current node
    draws: int = 0


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
    #: id(original constructor call) of layers called with Keras' mask: built from ``masked_template``
    masked_layers: set[int] = field(default_factory=set)
    #: value kinds ("activation", "initializer") looked up at run time: emit their table
    value_tables: set[str] = field(default_factory=set)
    #: per-file state of programmatic rules (rules themselves are shared singletons)
    rule_state: dict[str, object] = field(default_factory=dict)
    #: what features know about this file (``Feature.file_facts``), by type
    file_facts: dict[type, object] = field(default_factory=dict)
    #: TF left as written on purpose (an allowance, a graph function): read it after the pass
    kept_tf: bool = False
    #: module-level names bound to the package's own code: relative imports and top-level
    #: functions (``package_helpers``)
    package_helpers: frozenset[str] = frozenset()
    #: module-level names bound once to a literal Keras config dict
    #: (``{"class_name": "VarianceScaling", "config": {...}}``): name -> its value
    keras_configs: dict[str, dict] = field(default_factory=dict)
    #: differences by design the report states once per file (``Note``)
    notes: list[Note] = field(default_factory=list)
    #: the file's text as read, None when not known (``mentions``)
    source: str | None = None

    #: ``mentions``' answers: rules ask per function and per call, each a search of the whole text
    _mentioned: dict[tuple[str, ...], bool] = field(default_factory=dict, repr=False)

    # -- asked by rules and converters -------------------------------------------------
    def mentions(self, *words: str) -> bool:
        """Whether the file's text holds one of ``words``. Where it holds none, no node of the
        original file spells one: no attribute or name is so called, and no name resolves to a
        symbol ending so (canonical names keep their last part), so a rule can skip a walk.
        Unknown and non-ASCII texts hold every word (Python folds identifiers under NFKC)."""
        known = self._mentioned.get(words)
        if known is None:
            text = self.source
            known = self._mentioned[words] = text is None or may_name(text, words)
        return known

    def resolve(self, node: cst.BaseExpression) -> str | None:
        return self.scopes.resolve(node)

    def target_expr(self, text: str) -> cst.BaseExpression:
        node, modules = _parsed_target(text, self.plan.modules)
        self.plan.needed.update(modules)
        return node

    def target_name(self, dotted: str) -> cst.BaseExpression:
        return self.plan.spell_node(dotted)

    def value_target(self, kind: str, source: str) -> str | None:
        record = self.tables.value(kind, source)
        if record is not None:
            return record.target
        if kind == "dtype":
            api = self.tables.api.get(self.dtype_source(source))
            if api is not None and api.is_name and not self.api_todo(api):
                return api.target
        return None

    def api_todo(self, record) -> str:
        """Why a record is not translated here: its ``todo``, except for a 64-bit dtype inside
        a function that runs under ``jax.enable_x64`` (rules/structure/x64_scopes.py)."""
        if record.x64 and any("x64" in frame.tags for frame in self.frames):
            return ""
        return record.todo

    def dtype_source(self, source: str) -> str:
        """The TF name record of a dtype: ``tensorflow.float32`` for itself, ``"float32"`` or TF's
        string aliases (``"float"``, ``"double"``, ``"half"``: ``tf.as_dtype``)."""
        if "." in source:
            return source
        return "tensorflow." + DTYPE_STRING_ALIASES.get(source, source)

    def value_lookup(self, kind: str, node: cst.BaseExpression) -> cst.BaseExpression:
        """``_TERN_ACTIVATIONS.get(x, x)``: a value only known at run time, mapped through the table
        when it is a name Keras knows; a callable passes through, as ``keras.activations.get`` does."""
        self.value_tables.add(kind)
        return cst.Call(
            func=cst.Attribute(value=cst.Name(value_table_name(kind)), attr=cst.Name("get")),
            args=[cst.Arg(node, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), cst.Arg(node.deep_clone())],
        )

    def value_table_statement(self, kind: str) -> cst.SimpleStatementLine:
        entries = []
        for (k, source), record in sorted(self.tables.values.items(), key=lambda kv: kv[0][1]):
            if k != kind or "." in source:
                continue
            target = "lambda x: x" if record.target == "None" else record.target
            target = re.sub(r"\{support:(\w+)\}", r"\1", target)  # imported from the package's support module
            entries.append(f"    {source!r}: {target},\n")
        if kind == "activation":
            entries.append("    None: lambda x: x,\n")
        if kind == "initializer":  # Keras' add_weight draws glorot_uniform when given None
            entries.append("    None: keras_default_initializer,\n")
        text = f"{value_table_name(kind)} = {{\n{''.join(entries)}}}\n"
        stmt, modules = _parsed_statement(text, self.plan.modules)
        self.plan.needed.update(modules)
        return stmt.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine(indent=False, comment=cst.Comment(
            f"# Keras {kind} names resolved at run time (generated by tern from its value table)."))])

    def file_fact(self, kind: type[T]) -> T | None:
        """A feature's facts about this file, if it has any (``Feature.file_facts``)."""
        return self.file_facts.get(kind)

    @property
    def frame(self) -> FunctionFrame | None:
        return self.frames[-1] if self.frames else None

    @property
    def keras_class(self):
        return self.classes[-1] if self.classes else None

    def rng_key(self, stream: str = NOISE_STREAM) -> cst.BaseExpression | Refusal:
        """An explicit PRNG key where the context has one to give; inside a module, from ``stream``."""
        if self.is_test:
            self.rng_counter += 1
            return self.target_expr(f"jax.random.key({self.rng_counter})")
        frame = self.frame
        if frame is not None and frame.in_module_method:
            return cst.parse_expression(f'self.make_rng("{stream}")')
        if frame is not None and len(self.frames) == 1:
            for feature in features():
                key = feature.draw_key(self, frame)
                if key is not None:
                    return key
        return Refusal(
            "JAX needs an explicit PRNG key here; add a `key` argument to this function "
            "and thread it from the caller"
        )

    # -- told by rules -----------------------------------------------------------------
    def edit(self, rule: str, before: cst.CSTNode, after: cst.CSTNode) -> None:
        self.edits.append(Edit(rule, _short(before), _short(after)))

    def note(self, construct: str, text: str) -> None:
        note = Note(construct, text)
        if note not in self.notes:
            self.notes.append(note)

    def todo(self, construct: str, reason: str) -> None:
        todo = Todo(construct, reason)
        if todo not in self.pending:
            self.pending.append(todo)


@functools.lru_cache(maxsize=4096)
def _parsed_target(text: str, modules) -> tuple[cst.BaseExpression, tuple[tuple[str, str], ...]]:
    """Parse and respell target code once per process (LibCST nodes are immutable)."""
    plan = ImportPlan(modules)
    node = respell(cst.parse_expression(text), plan)
    return node, tuple(plan.needed.items())


@functools.lru_cache(maxsize=64)
def _parsed_statement(text: str, modules):
    plan = ImportPlan(modules)
    node = respell(cst.parse_statement(text), plan)
    return node, tuple(plan.needed.items())


def _short(node: cst.CSTNode) -> str:
    return short_code(node, 120)
