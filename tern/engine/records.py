"""Rule data: one record per API, per Keras layer, per value mapping.

The tables live in ``rules/`` (the ``tern_rules`` package) as TOML so that adding an
API or a layer is one record, never engine code. Records are loaded once per process.
"""

from __future__ import annotations

import fnmatch
import functools
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

DROP = "-"


@dataclass(frozen=True)
class Signature:
    """How a source call's arguments become the target's.

    ``params`` is the source signature in positional order. ``rename`` maps a source
    parameter to a target keyword (``"-"`` drops it: only for arguments with no effect,
    such as ``name``); a ``*name`` entry takes the remaining positional arguments, which
    stay positional. ``unsupported`` parameters, when passed, leave the call as written
    with a TODO carrying the reason. ``defaults`` are target keywords written out when the
    source default differs from the target's. ``convert`` names a value converter.
    ``inert`` lists, per parameter, literal source values that mean "not used" (Keras'
    ``use_ema=False``, ``weight_decay=None``): passing exactly one of them is passing nothing,
    so an unsupported parameter given its inert value does not block the call.
    """

    params: tuple[str, ...] = ()
    positional: int = 1
    rename: dict[str, str] = field(default_factory=dict)
    unsupported: dict[str, str] = field(default_factory=dict)
    defaults: dict[str, str] = field(default_factory=dict)
    convert: dict[str, str] = field(default_factory=dict)
    inert: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class ApiRecord:
    """A ``tf.*`` / ``keras.ops.*`` symbol and its JAX counterpart.

    Either ``target`` (a call with mapped arguments, or a plain name when ``params`` is
    empty) or ``template`` (an expression with ``{param}`` placeholders; ``[[...]]`` spans
    vanish when a placeholder inside is absent; ``{key}`` asks the context for a PRNG key).
    A record with ``todo`` is never translated: every use gets a TODO with that reason.
    """

    source: str
    aliases: tuple[str, ...]
    signature: Signature
    target: str | None = None
    template: str | None = None
    constant: str | None = None  # a Python literal the name stands for (``Reduction.AUTO`` -> ``"auto"``)
    todo: str = ""
    note: str = ""
    origin: str = ""
    #: a 64-bit dtype: its ``todo`` does not apply where the code runs under ``jax.enable_x64``
    x64: bool = False

    @property
    def is_name(self) -> bool:
        return self.template is None and not self.signature.params

    @property
    def rule_id(self) -> str:
        return f"api:{self.source}"


@dataclass(frozen=True)
class WeightMapEntry:
    """One Keras variable and where it lands in the Flax variable tree.

    ``flax`` is a ``/``-joined path whose first element is the collection
    (``params`` or ``batch_stats``). ``transform`` names a function in
    ``tern.weights.port`` with its arguments, e.g. ``"reshape_depthwise"``.
    """

    keras: str
    flax: str
    transform: str = ""


@dataclass(frozen=True)
class LayerRecord:
    """A Keras layer and its ``flax.linen`` form.

    A layer with parameters has a ``target`` module class. A stateless layer has an
    ``apply`` template over its call inputs (``{inputs}``) and constructor parameters, and
    may have a ``masked_apply`` (also over ``{mask}``) for a call given Keras' ``mask=``.
    A module that nests another (``RNN(cell)``) gives its constructor as ``template``, and
    ``masked_template`` for an instance that is called with Keras' ``mask``
    (``FileContext.masked_layers``), whose call then passes ``mask=`` on.
    ``output`` post-processes the module's result (``{outputs}[:, -1]`` for a Keras RNN's
    last step) unless the constructor param named by ``unless`` is literally True.
    ``call`` maps Keras call keywords to Flax ones as templates (``"-"`` drops them);
    ``training`` there is also injected when the caller did not pass it, because Keras
    propagates the outer call's training flag and Flax needs it explicitly.
    ``call_defaults`` give an absent call argument a value from the others (Keras' MHA
    ``key`` defaults to ``value``). ``regularizers`` names, per regularizer parameter, the
    Keras variable it penalizes (its Flax param comes from ``weights``) or ``outputs`` for
    the activity regularizer: the layer is then wrapped to record those loss terms
    (``tern/engine/regularizers.py``).
    """

    source: str
    aliases: tuple[str, ...]
    signature: Signature
    target: str | None = None
    apply: str | None = None
    masked_apply: str | None = None
    template: str | None = None
    masked_template: str | None = None
    output_template: str | None = None
    output_unless: str | None = None
    call_params: tuple[str, ...] = ("inputs",)
    call: dict[str, str] = field(default_factory=dict)
    call_unsupported: dict[str, str] = field(default_factory=dict)
    call_defaults: dict[str, str] = field(default_factory=dict)
    init_caveats: dict[str, str] = field(default_factory=dict)
    activation: str | None = None
    weights: tuple[WeightMapEntry, ...] = ()
    regularizers: dict[str, str] = field(default_factory=dict)
    note: str = ""
    origin: str = ""

    @property
    def rule_id(self) -> str:
        return f"layer:{self.source}"

    @property
    def weights_one_to_one(self) -> bool:
        """Each Keras variable is exactly one Flax array (so variable counts agree)."""
        return len({w.keras for w in self.weights}) == len(self.weights)



@dataclass(frozen=True)
class ValueRecord:
    """A string or symbol value (activation, initializer, padding) and its target text."""

    kind: str
    source: str
    target: str
    note: str = ""
    #: the same callable as one named definition (``{support:keras_gelu}``), for code that
    #: compares it by identity (``if self.activation == keras.activations.gelu``): a target
    #: such as ``functools.partial(...)`` is a new object wherever it is written
    named: str | None = None


@dataclass(frozen=True)
class AllowedRecord:
    """A TF API family a translation keeps on purpose (``rules/allowed/*.toml``): tf.data.

    Its uses are not residue: no TODO, listed in the report as allowed TF use. ``methods``
    keep a chain a dataset; ``graph_methods`` name the parameters (in order) of the methods
    whose function arguments run in TF's graph, where only ``graph_allows`` names may
    stay; ``bridge`` is the template that makes a ``for`` loop over a dataset yield NumPy.
    """

    name: str
    prefix: str
    why: str
    import_comment: str
    jit_reason: str
    constructors: tuple[str, ...] = ()
    methods: frozenset[str] = frozenset()
    graph_methods: dict[str, tuple[str, ...]] = field(default_factory=dict)
    graph_allows: str = ""
    graph_refuses: tuple[str, ...] = ()
    graph_why: str = ""
    graph_reason: str = ""
    bridge: str = ""
    origin: str = ""

    def covers(self, name: str) -> bool:
        return name == self.prefix or name.startswith(self.prefix + ".")

    def makes_dataset(self, name: str) -> bool:
        return self.covers(name) and any(fnmatch.fnmatchcase(name, p) for p in self.constructors)

    def graph_params(self, method: str) -> tuple[tuple[int, str], ...]:
        """(position, name) of each parameter of ``method`` that takes a graph function."""
        return tuple((i, p) for i, p in enumerate(self.graph_methods.get(method, ()))
                     if p.endswith("_func") or p == "predicate")

    def allowed_in_graph(self, name: str) -> bool:
        def under(prefix: str) -> bool:
            return name == prefix or name.startswith(prefix + ".")

        return bool(self.graph_allows) and under(self.graph_allows) and not any(under(p) for p in self.graph_refuses)


@dataclass(frozen=True)
class TargetModule:
    name: str
    alias: str


@dataclass(frozen=True)
class Tables:
    api: dict[str, ApiRecord]
    layers: dict[str, LayerRecord]
    values: dict[tuple[str, str], ValueRecord]
    modules: tuple[TargetModule, ...]
    canonical: tuple[tuple[str, str], ...]
    allowed: tuple[AllowedRecord, ...] = ()

    def allowance(self, name: str) -> AllowedRecord | None:
        """The allowed-TF record covering canonical ``name``, if any."""
        for record in self.allowed:
            if record.covers(name):
                return record
        return None

    def value(self, kind: str, source: str) -> ValueRecord | None:
        return self.values.get((kind, source))


def _signature(raw: dict[str, Any]) -> Signature:
    return Signature(
        params=tuple(raw.get("params", ())),
        positional=int(raw.get("positional", 1)),
        rename=dict(raw.get("rename", {})),
        unsupported=dict(raw.get("unsupported", {})),
        defaults={k: str(v) for k, v in raw.get("defaults", {}).items()},
        convert=dict(raw.get("convert", {})),
        inert={k: (v,) if isinstance(v, str) else tuple(v) for k, v in raw.get("inert", {}).items()},
    )


def api_record(raw: dict[str, Any], origin: str) -> ApiRecord:
    return ApiRecord(
        source=raw["source"],
        aliases=tuple(raw.get("aliases", ())),
        signature=_signature(raw),
        target=raw.get("target"),
        template=raw.get("template"),
        constant=raw.get("constant"),
        todo=raw.get("todo", ""),
        note=raw.get("note", ""),
        origin=origin,
        x64=raw.get("x64", False),
    )


def _layer(raw: dict[str, Any], origin: str) -> LayerRecord:
    return LayerRecord(
        source=raw["source"],
        aliases=tuple(raw.get("aliases", ())),
        signature=_signature(raw),
        target=raw.get("target"),
        apply=raw.get("apply"),
        masked_apply=raw.get("masked_apply"),
        template=raw.get("template"),
        masked_template=raw.get("masked_template"),
        output_template=raw.get("output", {}).get("template"),
        output_unless=raw.get("output", {}).get("unless"),
        call_params=tuple(raw.get("call_params", ("inputs",))),
        call=dict(raw.get("call", {})),
        call_unsupported=dict(raw.get("call_unsupported", {})),
        call_defaults=dict(raw.get("call_defaults", {})),
        init_caveats=dict(raw.get("init_caveats", {})),
        activation=raw.get("activation"),
        weights=tuple(WeightMapEntry(**w) for w in raw.get("weights", ())),
        regularizers=dict(raw.get("regularizers", {})),
        note=raw.get("note", ""),
        origin=origin,
    )


def _allowed(raw: dict[str, Any], origin: str) -> AllowedRecord:
    return AllowedRecord(
        name=raw["name"], prefix=raw["prefix"], why=raw["why"], import_comment=raw["import_comment"],
        jit_reason=raw["jit_reason"], constructors=tuple(raw.get("constructors", ())),
        methods=frozenset(raw.get("methods", ())),
        graph_methods={k: tuple(v) for k, v in raw.get("graph_methods", {}).items()},
        graph_allows=raw.get("graph_allows", ""), graph_refuses=tuple(raw.get("graph_refuses", ())), graph_why=raw.get("graph_why", ""), graph_reason=raw.get("graph_reason", ""),
        bridge=raw.get("bridge", ""), origin=origin,
    )


def rules_root() -> Path:
    return Path(str(resources.files("tern_rules")))


def _index(records, what: str) -> dict:
    index: dict[str, Any] = {}
    for record in records:
        for name in (record.source, *record.aliases):
            if name in index:
                raise ValueError(
                    f"{what} {name!r} is defined twice: {index[name].origin} and {record.origin}"
                )
            index[name] = record
    return index


def load_tables(root: Path | None = None) -> Tables:
    """Read every table under ``root`` (default: the installed ``rules/``)."""
    root = root or rules_root()
    api, layers, values, allowed = [], [], {}, []
    for path in sorted(root.rglob("*.toml")):
        rel = path.relative_to(root).as_posix()
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        for i, raw in enumerate(data.get("api", ())):
            api.append(api_record(raw, f"{rel}#{i}"))
        for i, raw in enumerate(data.get("layer", ())):
            layers.append(_layer(raw, f"{rel}#{i}"))
        for i, raw in enumerate(data.get("allowed", ())):
            allowed.append(_allowed(raw, f"{rel}#{i}"))
        for raw in data.get("value", ()):
            record = ValueRecord(**raw)
            values[(record.kind, record.source)] = record
    targets = tomllib.loads((root / "targets.toml").read_text(encoding="utf-8"))
    modules = tuple(TargetModule(**m) for m in targets["module"])
    canonical = tuple(
        sorted(
            ((c["prefix"], c["canonical"]) for c in targets["canonical"]),
            key=lambda pc: -len(pc[0]),
        )
    )
    return Tables(
        api=_index(api, "API"),
        layers=_index(layers, "layer"),
        values=values,
        modules=tuple(sorted(modules, key=lambda m: -len(m.name))),
        canonical=canonical,
        allowed=tuple(allowed),
    )


@functools.cache
def tables() -> Tables:
    return load_tables()
