"""Keras' implicit masks made explicit in a layer's ``call``.

A Keras layer that supports masking attaches a mask to its output, and the next layer whose
``call`` takes ``mask`` is handed it without the code saying so (``padding_mask`` given to an
encoder block comes out on its output and reaches a ``GlobalAveragePooling1D`` two lines
later). Flax has no implicit masks: without this rule the translation pools over the padding.

The rule follows masks through the straight-line code of each Keras class's ``call``: a mask
comes from a sublayer called with ``mask=``; it survives layers that pass it on (the table
``implicit_masks.toml``, a package class with ``supports_masking``) and stops at any other
operation (Keras' eager ops drop it). Where it reaches a layer that reads it and the call
does not pass one, ``mask=<name>`` is added (the layer tables then map it); where the mask
cannot be written there (an expression, a branch that may or may not set it, a layer whose
masking this rule does not model) the call gets a TODO instead. Masks the caller attaches to
``call``'s own inputs are not followed across classes; a masked value handed to a package
class whose layers may read it leaves a TODO at that call, and the output of a package class
that makes masks inside (``mask_zero=True``) counts as carrying an unknown one: Keras leaves an
inner layer's mask on the tensor a layer returns.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
import libcst.matchers as m

from tern.engine.package import class_masks
from tern.engine.render import commas
from tern.engine.results import code
from tern.engine.rule import Rule
from tern.engine.walk import children, findall, walk

TABLE = Path(__file__).with_name("implicit_masks.toml")
STATE = "implicit_masks"
UNKNOWN = "unknown"  # a mask is there, but not one the rule can write at the reader
DROP_MASK_ZERO = "drop mask_zero"  # an Embedding whose every mask the plan hands on


@dataclass(frozen=True)
class Handling:
    """What a layer does with the mask on its input: reads it (``reads``), and which mask its output carries."""

    output: str = "none"  # "input", "none", "unknown", "sequences" (an RNN's: "input" when return_sequences=True)
    reads: bool = False
    todo: str | None = None  # why a mask it reads cannot be passed explicitly
    makes: bool = False  # its output may carry a mask made inside it, whatever its input's


@dataclass(frozen=True)
class Table:
    passes: frozenset[str]
    consumes: dict[str, Handling]
    unknown: frozenset[str]


@functools.cache
def table() -> Table:
    data = tomllib.loads(TABLE.read_text(encoding="utf-8"))
    consumes = {
        name: Handling(output=raw["output"], reads=True, todo=raw.get("todo"))
        for name, raw in data["consumes"].items()
    }
    return Table(frozenset(data["passes"]), consumes, frozenset(data["unknown"]))


@functools.cache
def _reader_tails() -> frozenset[str]:
    return frozenset(name.rsplit(".", 1)[-1] for name in table().consumes)


@dataclass(frozen=True)
class PassMask:
    mask: cst.BaseExpression


@dataclass(frozen=True)
class Unsure:
    construct: str
    reason: str


@dataclass(frozen=True)
class _Package:
    """The package's classes that read masks (a table reader, or a ``call`` taking ``mask``) and
    that make them (``mask_zero=True`` inside): worked out once per class analysis."""

    readers: frozenset[str]
    makers: frozenset[str]

    @classmethod
    def of(cls, info) -> _Package:
        facts = {name: class_masks(info, name) for name in info.classes}
        return cls(_reader_tails() | {n for n, f in facts.items() if f.takes_mask},
                   frozenset(n for n, f in facts.items() if f.makes_masks))


def _handling(ctx, ref, package: _Package) -> Handling:
    if ref.many or ref.sequential:
        return Handling(output=UNKNOWN, reads=True, todo="Keras hands the mask from layer to layer inside it; pass it to each by hand")
    if ref.record is not None:
        source = ref.record.source
        data = table()
        if source in data.passes:
            return Handling(output="input")
        if source in data.consumes:
            return data.consumes[source]
        return Handling(output=UNKNOWN if source in data.unknown else "none")
    if ref.package_class is not None:
        facts = class_masks(ctx.package, ref.package_class)
        # no masking support of its own, but an inner layer's mask stays on what it returns
        makes = facts.output == "none" and (facts.makes_masks or ctx.package.reaches(ref.package_class, package.makers))
        output = "unknown" if makes else facts.output
        if ctx.package.reaches(ref.package_class, package.readers):
            return Handling(output=output, reads=True, makes=makes,
                            todo=f"Keras attaches the mask to the input of {ref.package_class}, whose layers may read it; pass it on by hand")
        return Handling(output=output, reads=facts.takes_mask, makes=makes)
    return Handling()


def _writable(node: cst.BaseExpression) -> bool:
    """A mask that can be repeated where it is read: a name, ``self.attr``, or ``ids != 0`` of one."""
    if isinstance(node, cst.Comparison):
        return _writable(node.left) and all(isinstance(t.comparator, cst.Integer) for t in node.comparisons)
    if isinstance(node, cst.Name):
        return node.value not in ("True", "False")
    return isinstance(node, cst.Attribute) and _writable(node.value)


class _Flow:
    """Masks per local name through one ``call`` body, and what each layer call needs."""

    def __init__(self, ctx, info):
        self.ctx, self.info = ctx, info
        self.package = _Package.of(ctx.package)
        self.masks: dict[str, object] = {}  # name -> cst mask | UNKNOWN (absent: no mask)
        self.plan: dict[int, PassMask | Unsure] = {}
        self.sources: set[str] = set()  # Embedding(mask_zero=True) attributes whose masks this plan follows
        self.masked: set[int] = set()  # id(constructor) of table layers called with a mask (given or planned)

    # -- statements ----------------------------------------------------------------------
    def block(self, statements) -> None:
        for statement in statements:
            self.statement(statement)

    def statement(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                self.small(small)
        elif isinstance(node, (cst.If, cst.For, cst.While, cst.Try, cst.With)):
            self.compound(node)
        else:
            self.expressions(node)

    def small(self, node: cst.CSTNode) -> None:
        if isinstance(node, cst.Assign):
            mask = self.expr(node.value)
            for target in node.targets:
                self.store(target.target, mask)
        elif isinstance(node, cst.AnnAssign) and node.value is not None:
            self.store(node.target, self.expr(node.value))
        elif isinstance(node, cst.AugAssign):
            self.expr(node.value)
            self.store(node.target, None)
        elif isinstance(node, (cst.Expr, cst.Return)) and node.value is not None:
            self.expr(node.value)
        else:
            self.expressions(node)

    def store(self, target: cst.BaseExpression, mask) -> None:
        if isinstance(target, cst.Name):
            name = target.value
            for other, held in list(self.masks.items()):
                if held is not UNKNOWN and any(n.value == name for n in findall(held, m.Name())):
                    self.masks[other] = UNKNOWN  # the mask's name now holds something else
            if mask is None:
                self.masks.pop(name, None)
            else:
                self.masks[name] = mask
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self.store(element.value, None if mask is None else UNKNOWN)

    def compound(self, node: cst.CSTNode) -> None:
        """Branches and loops: a name whose mask differs between the paths gets an unknown one."""
        before = dict(self.masks)
        for child in children(node):
            if isinstance(child, cst.BaseExpression):
                self.expr(child)
        paths = []
        for body in _bodies(node):
            self.masks = dict(before)
            self.block(body)
            paths.append(self.masks)
        if not isinstance(node, cst.If) or node.orelse is None:
            paths.append(before)  # the body may not run
        merged: dict[str, object] = {}
        for name in set().union(*paths):
            held = [p.get(name) for p in paths]
            keys = {code(h) if isinstance(h, cst.CSTNode) else h for h in held}
            merged_value = held[0] if len(keys) == 1 else UNKNOWN
            if merged_value is not None:
                merged[name] = merged_value
        self.masks = merged

    def expressions(self, node: cst.CSTNode) -> None:
        for child in children(node):
            if isinstance(child, cst.BaseExpression):
                self.expr(child)
            elif not isinstance(child, (cst.BaseSuite, cst.BaseStatement)):
                self.expressions(child)

    # -- expressions ---------------------------------------------------------------------
    def expr(self, node: cst.BaseExpression):
        """The mask ``node`` carries (None: none), planning the layer calls inside it."""
        if isinstance(node, cst.Name):
            return self.masks.get(node.value)
        if isinstance(node, cst.Call):
            ref = self._layer(node.func)
            if ref is not None:
                return self.layer_call(node, ref)
        self.expressions(node)
        return None  # any other operation drops Keras' mask

    def _layer(self, func: cst.BaseExpression):
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            return self.info.sublayers.get(func.attr.value)
        return None

    def layer_call(self, node: cst.Call, ref):
        given = next((a.value for a in node.args if a.keyword is not None and a.keyword.value == "mask"), None)
        first = next((a.value for a in node.args if a.keyword is None), None)
        if first is None:
            first = next((a.value for a in node.args if a.keyword is not None and a.keyword.value in ("inputs", "query")), None)
        attached, read = None, None  # the first input's mask (what Keras passes on), any input's (what MHA reads)
        for i, arg in enumerate(node.args):
            mask = self.expr(arg.value)
            if arg.value is first:
                attached = mask
            if mask is not None and (i < 3 and arg.keyword is None or arg.keyword is not None and arg.keyword.value in ("query", "value", "key")):
                read = read or mask
        handling = _handling(self.ctx, ref, self.package)
        construct = f"mask of {code(node.func)}"
        if given is None and handling.reads:
            if handling.todo is not None and (read or attached) is not None:
                self.plan[id(node)] = Unsure(construct, handling.todo)
            elif attached is UNKNOWN:
                self.plan[id(node)] = Unsure(construct, "Keras hands this layer the mask of its input, which tern cannot write here (set in a branch, computed, or made inside another layer); pass mask= by hand")
            elif attached is not None:
                self.plan[id(node)] = PassMask(attached)
        if (given is not None or isinstance(self.plan.get(id(node)), PassMask)) and ref.record is not None and ref.built is not None:
            self.masked.add(id(ref.built))
        previous = attached if given is None else (None if _is_none(given) else given if _writable(given) else UNKNOWN)
        if _masks_zero(ref):
            # Keras' Embedding.compute_mask: ``ops.not_equal(inputs, 0)``
            if first is None or not _writable(first):
                return UNKNOWN
            self.sources.add(node.func.attr.value)
            return cst.Comparison(first, [cst.ComparisonTarget(cst.NotEqual(), cst.Integer("0"))])
        output = _sequences(ref) if handling.output == "sequences" else handling.output
        if handling.makes:
            return UNKNOWN
        if previous is None or output == "none":
            return None
        return previous if output == "input" else UNKNOWN


def _sequences(ref) -> str:
    """An RNN's output mask: the input's when ``return_sequences=True`` (Keras' ``RNN.compute_mask``)."""
    given = next((a.value for a in ref.built.args if a.keyword is not None and a.keyword.value == "return_sequences"), None) \
        if ref.built is not None else None
    if given is None or (isinstance(given, cst.Name) and given.value == "False"):
        return "none" if ref.built is not None else UNKNOWN
    return "input" if isinstance(given, cst.Name) and given.value == "True" else UNKNOWN


def _masks_zero(ref) -> bool:
    """``Embedding(..., mask_zero=True)``."""
    if ref.record is None or ref.record.source != "keras.layers.Embedding" or ref.built is None:
        return False
    return any(
        a.keyword is not None and a.keyword.value == "mask_zero" and isinstance(a.value, cst.Name) and a.value.value == "True"
        for a in ref.built.args
    )


def _is_none(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def _bodies(node: cst.CSTNode):
    if isinstance(node, cst.If):
        yield node.body.body
        if node.orelse is not None:
            orelse = node.orelse
            yield [orelse] if isinstance(orelse, cst.If) else orelse.body.body
    elif isinstance(node, (cst.For, cst.While)):
        yield node.body.body
        if node.orelse is not None:
            yield node.orelse.body.body
    elif isinstance(node, cst.Try):
        yield node.body.body
        for handler in node.handlers:
            yield handler.body.body
    elif isinstance(node, cst.With):
        yield node.body.body


def _self_calls(cls: cst.ClassDef, exclude: cst.FunctionDef) -> set[str]:
    """``self.X`` attributes called in the class's methods other than ``exclude``."""
    calls = _SelfCalls(exclude)
    walk(cls, calls)
    return calls.found


class _SelfCalls(cst.CSTVisitor):
    def __init__(self, exclude: cst.FunctionDef):
        self.exclude, self.found = exclude, set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is not self.exclude

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            self.found.add(func.attr.value)


class ImplicitMasksRule(Rule):
    id = "structure:implicit-masks"
    scope = "all"
    order = 20

    def visit_class(self, ctx, node):
        """Plan the class's ``call`` before ``__init__`` is translated: an Embedding whose mask the
        plan hands on loses ``mask_zero`` there."""
        info = ctx.keras_class
        call = next((s for s in node.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "call"), None)
        if info is None or call is None:
            return
        flow = _Flow(ctx, info)
        flow.block(call.body.body)
        plan = ctx.rule_state.setdefault(STATE, {})
        plan.update(flow.plan)
        ctx.masked_layers |= flow.masked
        used_elsewhere = _self_calls(node, exclude=call)
        for attr, ref in info.sublayers.items():
            if attr in flow.sources and attr not in used_elsewhere and ref.built is not None:
                plan[id(ref.built)] = DROP_MASK_ZERO

    def prepare_call(self, ctx, original, updated):
        step = ctx.rule_state.get(STATE, {}).get(id(original))
        if isinstance(step, Unsure):
            ctx.todo(step.construct, step.reason)
        if step is DROP_MASK_ZERO:
            args = [a for a in updated.args if not (a.keyword is not None and a.keyword.value == "mask_zero")]
            return updated.with_changes(args=commas(args))
        if not isinstance(step, PassMask):
            return None
        args = list(updated.args)
        if args:
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(cst.Arg(step.mask.deep_clone(), keyword=cst.Name("mask"),
                            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
        return updated.with_changes(args=args)


RULE = ImplicitMasksRule()
