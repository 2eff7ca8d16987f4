"""The single-pass rewrite of one file: tables applied inline, programmatic rules at hooks.

One LibCST transformer walks the file once. Calls and names that resolve to table
records are rewritten where they stand; classes, functions and statements are offered to
the discovered rules. Anything TF that survives a statement gets a ``TODO(tern)`` there.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m


from tern.engine.context import FileContext, FunctionFrame, LayerRef
from tern.engine.dispatch import CachedHooks
from tern.engine.features import KeptTF, features
from tern.engine.results import Refusal
from tern.engine.layers import Stateless, apply_stateless, call_arguments, construct, stateless_lambda
from tern.engine.names import (Canonicalizer, Scopes, dotted_name, import_bindings, may_name, parsed,
                               short_name as _short_name, source_facts)
from tern.engine.package import PackageInfo, close_over_bases, scan_source, training_layer_names
from tern.engine.records import ApiRecord, Tables, tables as default_tables
from tern.engine.render import api_call, commas, bind
from tern.engine.results import ModuleTexts, code
from tern.engine.templates import expand_template
from tern.engine.report import TODO_LINE, TODO_MARK, AllowedUse, Edit, Note, Todo
from tern.engine.rule import HOOKS, Rule, consumed_names, discover, overrides
from tern.engine.support_module import SUPPORT_MODULE, import_statement, names as support_names
from tern.engine.targets import ImportPlan, fallback_lines, finalize_imports, names_in_use
from tern.engine.transform import transform
from tern.engine.walk import findall, indexed, walk


@dataclass
class Translation:
    code: str
    edits: list[Edit] = field(default_factory=list)
    todos: list[Todo] = field(default_factory=list)
    allowed: list[AllowedUse] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    #: what the file imports from its package's support module (``tern/engine/support_module.py``)
    support: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.edits)


def is_test_path(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.startswith("test_") or base.endswith("_test.py") or base == "conftest.py"


_STATEMENTS = (
    cst.SimpleStatementLine, cst.If, cst.For, cst.While, cst.With, cst.Try,
    cst.FunctionDef, cst.ClassDef,
)


class _SourceRefs(cst.CSTVisitor):
    """Canonical TF/Keras names still referenced in a statement (header only for blocks)."""

    def __init__(self, ctx: FileContext, opaque: set[int] = frozenset()):
        self.ctx = ctx
        self.opaque = opaque  # graph functions: checked on their own (tern/features/tf_data/graph_functions.py)
        self.found: list[str] = []

    def visit_Lambda(self, node) -> bool:
        return id(node) not in self.opaque

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        name = self.ctx.resolve(node)
        if name is not None:
            self.found.append(name)
        else:
            walk(node.value, self)  # ``attr`` is a member name, never a reference
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        walk(node.value, self)
        return False

    def visit_Name(self, node: cst.Name) -> None:
        name = self.ctx.resolve(node)
        if name is not None:
            self.found.append(name)

    def visit_IndentedBlock(self, node) -> bool:
        return False

    def visit_Import(self, node) -> bool:
        return False

    def visit_ImportFrom(self, node) -> bool:
        return False


@functools.cache
def _hooked(is_test: bool) -> dict[str, tuple[Rule, ...]]:
    """Per hook, the rules that apply to a test file (or not) and have that hook, in order."""
    rules = [r for r in discover() if r.applies(is_test)]
    return {hook: tuple(r for r in rules if overrides(r, hook)) for hook in HOOKS}


class Translator(CachedHooks):
    def __init__(self, ctx: FileContext):
        super().__init__()
        self.ctx = ctx
        #: per hook, the rules that have one (in order): the others' inherited hooks all return None
        self.hooked = _hooked(ctx.is_test)
        self.consumed = consumed_names()
        self._callees: set[int] = set()
        self._edit_marks: list[int] = []
        self._edit_mark = 0
        self._not_refs: set[int] = set()
        self._compared: set[int] = set()  # operands of ==, is, in: identity matters there
        self._identity_values: set[str] = set()  # activation values the file compares: named, not built
        self._annotations = 0  # depth of annotations around the current node
        self._touched_source = [False]
        self._pending_at: list[int] = []
        self._headers: list[cst.CSTNode] = []  # if/for/while/with statements being visited
        self._held: list[list[Todo]] = []  # their headers' TODOs, kept off their bodies' first statement
        self._opaque: set[int] = set()  # what a feature keeps (graph functions tf.data runs): left exactly as written
        self._kept_lambdas: dict[int, object] = {}  # id(lambda) -> the Feature that keeps it
        self._generated: set[int] = set()  # support code an earlier run inlined: left as it is

    # -- scopes ----------------------------------------------------------------------
    def visit_Module(self, node: cst.Module) -> None:
        imports: dict[str, str] = {}
        for stmt in _top_level_lines(node):
            for small in stmt.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    imports.update(import_bindings(small))
        self.ctx.scopes = Scopes(imports, self.ctx.scopes._canonical, self.ctx.scopes._facts)
        self._generated = _generated_support(node)
        self._identity_values = self._compared_values(node)

    def _compared_values(self, module: cst.Module) -> set[str]:
        """Activation values this file compares with ``==``/``is``: everywhere in the file they
        are written as one named definition, so the comparison means what it meant in TF."""
        out = set()
        for comparison in findall(module, m.Comparison()):
            for operand in (comparison.left, *(t.comparator for t in comparison.comparisons)):
                name = self.ctx.resolve(operand) if isinstance(operand, (cst.Name, cst.Attribute)) else None
                value = self.ctx.tables.value("activation", name) if name else None
                if value is not None and value.named:
                    out.add(name)
        return out

    def visit_ClassDef(self, node: cst.ClassDef) -> bool | None:
        if id(node) in self._generated:
            return self._keep_generated(node)
        self._not_refs.add(id(node.name))
        self.ctx.classes.append(None)
        for rule in self.hooked["visit_class"]:
            rule.visit_class(self.ctx, node)
        self._touched_source.append(False)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool | None:
        if id(node) in self._generated:
            return self._keep_generated(node)
        keeper = next((f for f in features() if f.keeps_function(self.ctx, node)), None)
        if keeper is not None:
            return self._keep_function(node, keeper)
        self.ctx.scopes.push_function(node)
        self._not_refs.add(id(node.name))
        self.ctx.frames.append(FunctionFrame(node.name.value))
        for rule in self.hooked["visit_function"]:
            rule.visit_function(self.ctx, node)
        self._touched_source.append(False)

    def visit_Lambda(self, node: cst.Lambda) -> bool | None:
        if id(node) in self._kept_lambdas:
            self._kept_lambdas[id(node)].check_kept(self.ctx, node)
            self.ctx.kept_tf = True
            return False
        self.ctx.scopes.push_function(node)
        self._repeat(1)

    def leave_Lambda(self, original, updated):
        if id(original) not in self._opaque:
            self.ctx.scopes.pop()
            self._repeat(-1)
        return updated

    # -- where a draw stands (FileContext.rng_key) ------------------------------------
    def _repeat(self, delta: int) -> None:
        if self.ctx.frame is not None:
            self.ctx.frame.repeated += delta

    def _enter_loop(self, node) -> None:
        self._enter_block(node)
        frame = self.ctx.frame
        if frame is not None:
            frame.loops.append(frame.loops_seen)
            frame.loops_seen += 1

    def _leave_loop(self, original, updated):
        if self.ctx.frame is not None:
            self.ctx.frame.loops.pop()
        return self._leave_block(original, updated)

    def _is_tape(self, node: cst.With) -> bool:
        return any(isinstance(i.item, cst.Call) and self.ctx.resolve(i.item.func) == "tensorflow.GradientTape"
                   for i in node.items)

    def _enter_with(self, node) -> None:
        self._enter_block(node)
        frame = self.ctx.frame
        if frame is not None and self._is_tape(node):
            frame.tapes.append(frame.tapes_seen)
            frame.tapes_seen += 1

    def _leave_with(self, original, updated):
        if self.ctx.frame is not None and self._is_tape(original):
            self.ctx.frame.tapes.pop()
        return self._leave_block(original, updated)

    def visit_ListComp(self, node) -> None:
        self._repeat(1)

    def leave_ListComp(self, original, updated):
        self._repeat(-1)
        return updated

    visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_ListComp
    leave_SetComp = leave_DictComp = leave_GeneratorExp = leave_ListComp

    def _keep_generated(self, node: cst.ClassDef | cst.FunctionDef) -> bool:
        """tern's own support code, inlined by an earlier run: already JAX, not offered to rules
        (it is the reference they translate to; rewriting it again would not be idempotent)."""
        self._opaque.add(id(node))
        self._touched_source.append(False)
        return False

    def _keep_function(self, node: cst.FunctionDef, keeper) -> bool:
        """A feature keeps it as written (tf.data runs it in its graph): not rewritten, not offered to rules."""
        self._opaque.add(id(node))
        self._touched_source.append(False)
        keeper.check_kept(self.ctx, node)
        self.ctx.kept_tf = True
        return False

    def visit_SimpleStatementLine(self, node) -> None:
        self._touched_source.append(False)
        self._pending_at.append(len(self.ctx.pending))

    def _enter_block(self, node) -> None:
        self._touched_source.append(False)
        if not isinstance(node, cst.Try):
            self._headers.append(node)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        """What the header of an if/for/while/with raised stands above that statement, not
        above the first statement of its body: held while the body is visited."""
        if self._headers and node in _header_blocks(self._headers[-1]):
            self._held.append(self.ctx.pending)
            self.ctx.pending = []

    def leave_IndentedBlock(self, original, updated):
        if self._headers and original in _header_blocks(self._headers[-1]):
            self.ctx.pending = self._held.pop() + self.ctx.pending
        return updated

    visit_If = visit_Try = _enter_block
    visit_For = visit_While = _enter_loop
    visit_With = _enter_with

    # -- names that are not references ------------------------------------------------
    def visit_Import(self, node) -> bool:
        return False

    def visit_ImportFrom(self, node) -> bool:
        return False

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._not_refs.add(id(node.attr))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._not_refs.add(id(node.keyword))

    def visit_Param(self, node: cst.Param) -> None:
        self._not_refs.add(id(node.name))

    def visit_Annotation(self, node: cst.Annotation) -> None:
        self._annotations += 1

    def leave_Annotation(self, original, updated):
        self._annotations -= 1
        return updated

    def visit_Comparison(self, node: cst.Comparison) -> None:
        self._compared.add(id(node.left))
        self._compared.update(id(target.comparator) for target in node.comparisons)

    # -- calls -------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        self._callees.add(id(node.func))
        self._edit_marks.append(len(self.ctx.edits))
        for feature in features():
            for argument in feature.kept_arguments(self.ctx, node):
                if isinstance(argument, cst.Lambda):
                    self._opaque.add(id(argument))
                    self._kept_lambdas[id(argument)] = feature

    def _refuse(self, original: cst.Call, construct: str, reason: str) -> cst.Call:
        """Leave the call exactly as written: a TODO says so, so nothing inside may change."""
        del self.ctx.edits[self._edit_mark:]
        self.ctx.todo(construct, reason)
        return original

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        ctx = self.ctx
        self._edit_mark = self._edit_marks.pop()
        for rule in self.hooked["prepare_call"]:
            prepared = rule.prepare_call(ctx, original, updated)
            if prepared is not None:
                ctx.edit(rule.id, original, prepared)
                updated = prepared
        name = ctx.resolve(original.func)
        if name is not None:
            self._touched_source[-1] = True
            record = ctx.tables.api.get(name)
            if record is not None:
                return self._apply_api(name, record, original, updated)
            layer = ctx.tables.layers.get(name)
            if layer is not None:
                built = construct(ctx, layer, updated, masked=id(original) in ctx.masked_layers)
                if isinstance(built, Refusal):
                    return self._refuse(original, _short_name(name), built.reason)
                if isinstance(built, Stateless):
                    ctx.stateless[id(original)] = built
                    lam = stateless_lambda(ctx, built)
                    if isinstance(lam, Refusal):
                        return self._refuse(original, _short_name(name), lam.reason)
                    ctx.edit(layer.rule_id, original, lam)
                    return lam
                ctx.edit(layer.rule_id, original, built)
                return built
        layer_call = self._layer_call(original, updated)
        if layer_call is not None:
            updated = layer_call
            if not isinstance(updated, cst.Call):
                return updated  # inlined (Identity, Cropping...): nothing left for call rules
        for rule in self.hooked["leave_call"]:
            out = rule.leave_call(ctx, original, updated)
            if out is not None:
                ctx.edit(rule.id, original, out)
                return out
        return updated

    def _layer_call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression | None:
        """``layer(x, training=...)`` for a layer the context knows: inline or via self.attr."""
        ctx = self.ctx
        inner = original.func
        stateless = ctx.stateless.get(id(inner)) if isinstance(inner, cst.Call) else None
        if stateless is not None:
            return self._stateless_call(stateless, original, updated, inline=True)
        record = None
        if isinstance(inner, cst.Call):
            layer_name = ctx.resolve(inner.func)
            record = ctx.tables.layers.get(layer_name) if layer_name else None
        ref = self._known_layer(original.func)
        if ref is not None and ref.record is not None and not ref.many:
            record = ref.record
        if record is None:
            return None
        if record.apply is not None:
            if len(updated.args) == 1 and updated.args[0].keyword is None:
                return None  # ``self.pool(x)``: the attribute holds the apply as a lambda
            built = construct(ctx, record, ref.built) if ref is not None and ref.built is not None else None
            if not isinstance(built, Stateless):
                ctx.todo(_short_name(record.source) + " call", "arguments besides the input, on a layer whose constructor tern did not see")
                return None
            return self._stateless_call(built, original, updated, inline=False)
        frame = ctx.frame
        training = frame.training if frame is not None else None
        masked = ref is not None and ref.built is not None and id(ref.built) in ctx.masked_layers
        args = call_arguments(ctx, record, updated, training, masked)
        if isinstance(args, Refusal):
            ctx.todo(_short_name(record.source) + " call", args.reason)
            return None
        out = updated.with_changes(args=commas(args))
        if code(out) != code(updated):
            ctx.edit(record.rule_id + ":call", original, out)
        return out

    def _stateless_call(self, stateless: Stateless, original: cst.Call, updated: cst.Call, inline: bool) -> cst.BaseExpression | None:
        """A parameter-free layer's call inlined: its ``apply``, or ``masked_apply`` when Keras' ``mask=`` is passed.
        ``self.pool(x)`` keeps calling the attribute's lambda (``inline`` False) unless a mask is given."""
        ctx, record = self.ctx, stateless.record
        bound = bind(updated, ("inputs", "mask"))
        if isinstance(bound, Refusal) or "inputs" not in bound.args:
            if not inline:
                ctx.todo(_short_name(record.source) + " call", "call arguments besides `inputs` and `mask` have no Flax counterpart here")
            return None
        mask = bound.args.get("mask")
        if mask is None or m.matches(mask, m.Name("None")):
            if not inline:
                return None
            out = apply_stateless(ctx, stateless, bound.args["inputs"])
        elif record.masked_apply is None:
            ctx.todo(_short_name(record.source) + " call", "call argument `mask`: Keras' masked form of this layer is not in the tables; apply the mask by hand")
            return None
        else:
            values = {**stateless.values, "inputs": bound.args["inputs"], "mask": mask}
            out = expand_template(record.masked_apply, values, ctx, record.signature.defaults)
        if isinstance(out, Refusal):
            ctx.todo(_short_name(record.source), out.reason)
            return None
        ctx.edit(record.rule_id, original, out)
        return out

    def _known_layer(self, func: cst.BaseExpression) -> LayerRef | None:
        ctx = self.ctx
        if isinstance(func, cst.Name) and ctx.frame is not None:
            return ctx.frame.layers.get(func.value)
        if (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value == "self"
            and ctx.keras_class is not None
        ):
            return ctx.keras_class.sublayers.get(func.attr.value)
        return None

    def _apply_api(self, name: str, record: ApiRecord, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        ctx = self.ctx
        short = _short_name(name)
        if ctx.api_todo(record):
            return self._refuse(original, short, ctx.api_todo(record))
        if record.is_name:
            return updated.with_changes(func=ctx.target_name(record.target))  # e.g. tf.float32(1)
        out = api_call(ctx, record, updated)
        if isinstance(out, Refusal):
            return self._refuse(original, short, out.reason)
        ctx.edit(record.rule_id, original, out)
        return out

    # -- names -------------------------------------------------------------------------
    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        return self._leave_name_like(original, updated)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self._leave_name_like(original, updated)

    def _leave_name_like(self, original, updated):
        ctx = self.ctx
        if id(original) in self._callees or id(original) in self._not_refs:
            return updated
        name = ctx.resolve(original)
        if name is None:
            if isinstance(original, cst.Attribute):
                for rule in self.hooked["leave_attribute"]:
                    out = rule.leave_attribute(ctx, original, updated)
                    if out is not None:
                        ctx.edit(rule.id, original, out)
                        return out
            return updated
        self._touched_source[-1] = True
        record = ctx.tables.api.get(name)
        if record is not None and ctx.api_todo(record):
            ctx.todo(_short_name(name), ctx.api_todo(record))
            return updated
        if record is not None and record.constant is not None:
            out = cst.parse_expression(record.constant)
            ctx.edit(record.rule_id, original, out)
            return out
        if record is not None and record.target is not None and (record.is_name or _plain(record)):
            out = expand_template(record.target, {}, ctx) if record.target.startswith("{support:") else ctx.target_name(record.target)
            ctx.edit(record.rule_id, original, out)
            return out
        value = ctx.tables.value("activation", name) if record is not None else None
        if value is not None and name in self._identity_values:
            out = expand_template(value.named, {}, ctx)
            ctx.edit(f"value:activation:{name}", original, out)
            return out
        if value is not None and value.target != "None" and id(original) in self._compared and "(" in value.target:
            ctx.todo(_short_name(name), f"compared as a value: its JAX spelling `{value.target}` is a new object "
                     "wherever it is written, so == and `is` against it never hold; compare a name bound once")
            return updated
        if value is not None and value.target != "None":
            # an activation passed uncalled (``activation=keras.activations.gelu``): the function
            # with Keras' defaults bound, as the activation table writes it
            out = ctx.target_expr(value.target)
            ctx.edit(f"value:activation:{name}", original, out)
            return out
        for rule in self.hooked["leave_attribute"]:
            if isinstance(original, cst.Attribute):
                out = rule.leave_attribute(ctx, original, updated)
                if out is not None:
                    ctx.edit(rule.id, original, out)
                    return out
        if self._annotations and name.startswith("keras.") and (record is None or not record.signature.params and record.template is None):
            # a Keras class named only as a type (``Union[str, keras.layers.Activation]``) with no
            # JAX type to name: the objects it stands for translate to functions and modules, an
            # annotation does not change what runs, and typing.Any claims nothing. TF's own types
            # (tf.RaggedTensor) are data JAX lacks: they keep their TODO.
            out = ctx.target_expr("typing.Any")
            ctx.edit("engine:annotation-type", original, out)
            return out
        return updated

    # -- parentheses we added that are not needed ------------------------------------
    def leave_Assign(self, original, updated):
        return _unparen_value(original, updated)

    def leave_Return(self, original, updated):
        return updated if updated.value is None else _unparen_value(original, updated)

    def leave_Arg(self, original, updated):
        return _unparen_value(original, updated)

    def leave_Element(self, original, updated):
        return _unparen_value(original, updated)

    # -- statements and blocks ---------------------------------------------------------
    def leave_SimpleStatementLine(self, original, updated):
        pending_at = self._pending_at.pop()
        for rule in self.hooked["leave_statement"]:
            out = rule.leave_statement(self.ctx, original, updated)
            if out is not None:
                if isinstance(out, cst.RemovalSentinel):
                    del self.ctx.pending[pending_at:]  # what it said was about the removed code
                    self.ctx.edit(rule.id, original, cst.Pass())
                else:
                    self.ctx.edit(rule.id, original, out)
                updated = out
                break
        return self._finish_statement(updated)

    def _leave_block(self, original, updated):
        if self._headers and self._headers[-1] is original:
            self._headers.pop()
        return self._finish_statement(updated)

    leave_If = leave_Try = _leave_block
    leave_For = leave_While = _leave_loop
    leave_With = _leave_with

    def leave_FunctionDef(self, original, updated):
        if id(original) in self._opaque:
            return self._finish_statement(updated, opaque=True)
        out = updated
        for rule in self.hooked["leave_function"]:
            res = rule.leave_function(self.ctx, original, out)
            if res is not None:
                self.ctx.edit(rule.id, _fn_header(original), _fn_header(res) if isinstance(res, cst.FunctionDef) else cst.Pass())
                out = res
        self.ctx.frames.pop()
        result = self._finish_statement(out)
        self.ctx.scopes.pop()
        return result

    def leave_ClassDef(self, original, updated):
        if id(original) in self._opaque:
            return self._finish_statement(updated, opaque=True)
        out = updated
        for rule in self.hooked["leave_class"]:
            if not isinstance(out, cst.ClassDef):
                break  # a rule replaced the class by other statements
            res = rule.leave_class(self.ctx, original, out)
            if res is not None:
                self.ctx.edit(rule.id, _header(original), _header(res) if isinstance(res, cst.ClassDef) else res)
                out = res
        result = self._finish_statement(out)
        self.ctx.classes.pop()
        return result

    def _finish_statement(self, node, opaque: bool = False):
        """Attach pending TODOs, plus one per TF name nothing translated (and no allowance keeps)."""
        touched = self._touched_source.pop() if len(self._touched_source) > 1 else False
        ctx = self.ctx
        if touched and not opaque and isinstance(node, cst.CSTNode) and not isinstance(node, cst.RemovalSentinel):
            refs = _SourceRefs(ctx, self._opaque)
            target = node
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                for dec in node.decorators:
                    walk(dec, refs)
                if isinstance(node, cst.FunctionDef):  # the header: annotations and defaults
                    walk(node.params, refs)
                    if node.returns is not None:
                        walk(node.returns, refs)
                if isinstance(node, cst.ClassDef):
                    for base in node.bases:
                        walk(base, refs)
            else:
                walk(target, refs)
            covered = {t.construct for t in ctx.pending}
            for name in refs.found:
                short = _short_name(name)
                if short in covered or name in self.consumed:
                    continue
                if ctx.tables.allowance(name) is not None:
                    ctx.kept_tf = True  # kept on purpose; the report lists it (tern/features/tf_data/kept.py)
                    continue
                covered.add(short)
                ctx.todo(short, _no_rule_reason(name, ctx.tables))
        if not ctx.pending:
            return node
        if not isinstance(node, _STATEMENTS):
            return node
        todos, ctx.pending = ctx.pending, []
        return _with_todo_comments(node, todos)

    def leave_Module(self, original, updated):
        for rule in self.hooked["leave_module"]:
            res = rule.leave_module(self.ctx, updated)
            if res is not None:
                updated = res
        return updated


def _top_level_lines(module: cst.Module) -> list[cst.SimpleStatementLine]:
    """The module's simple statements, with the imports of a top-level import with a
    fallback (``try: from tensorflow.keras.utils import X`` ``except ImportError: from
    tensorflow.keras.utils.legacy import X``): they bind module names as much as an
    unconditional import does."""
    lines = []
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            lines.append(stmt)
        else:
            fallback = fallback_lines(stmt)
            if fallback and all(isinstance(s, (cst.Import, cst.ImportFrom)) for line in fallback for s in line.body):
                lines.extend(fallback)
    return lines


def _header_blocks(header: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """The blocks of an if/for/while/with: its body and its ``else:`` body (not an ``elif``,
    which is a header of its own)."""
    orelse = getattr(header, "orelse", None)
    return (header.body, orelse.body) if isinstance(orelse, cst.Else) else (header.body,)


#: TF parameters no JAX function has: passed to the JAX function, they fail loudly
TF_ONLY_PARAMS = frozenset({"layout"})


def _plain(record: ApiRecord) -> bool:
    """Safe to pass uncalled (``map_fn(tf.nn.relu, x)``, ``preactivation=tf.zeros_like``):
    callers will pass arguments positionally, so only renames of leading positional params
    are harmless. A dtype converter is harmless too: the caller's own dtypes are translated
    where it passes them; an unsupported TF-only parameter fails loudly if passed."""
    sig = record.signature
    lead = set(sig.params[: sig.positional])
    return record.template is None and not sig.defaults and set(sig.unsupported) <= TF_ONLY_PARAMS and all(
        kind == "dtype" for kind in sig.convert.values()) and all(
        v == k or k in lead for k, v in sig.rename.items() if v != "-"
    )


def _unparen_value(original, updated):
    """``updated`` with its value's added parentheses dropped (untouched values: same node)."""
    if updated.value is original.value or not updated.value.lpar:
        return updated
    value = _unparen(original.value, updated.value)
    return updated if value is updated.value else updated.with_changes(value=value)


def _unparen(original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
    """Drop parentheses the translation added (the source had none there)."""
    if isinstance(updated, (cst.Tuple, cst.GeneratorExp, cst.Yield, cst.NamedExpr)):
        return updated  # there the parentheses are part of the meaning
    if updated.lpar and not original.lpar and len(updated.lpar) == 1:
        return updated.with_changes(lpar=[], rpar=[])
    return updated


def _no_rule_reason(name: str, tables: Tables) -> str:
    record = tables.api.get(name)
    if record is not None and not record.todo and (record.template is not None or record.signature.params):
        # a call is translated, but its arguments are reshaped: a bare reference cannot be
        return "translated where it is called, not passed uncalled (its arguments are remapped): call it, e.g. in a lambda"
    return "no rule translates this symbol yet"


def _header(node: cst.CSTNode) -> cst.CSTNode:
    if isinstance(node, cst.ClassDef):
        return node.with_changes(body=cst.IndentedBlock([cst.SimpleStatementLine([cst.Expr(cst.Ellipsis())])]), leading_lines=[])
    return node


def _fn_header(node: cst.CSTNode) -> cst.CSTNode:
    if isinstance(node, cst.FunctionDef):
        return node.with_changes(body=cst.IndentedBlock([cst.SimpleStatementLine([cst.Expr(cst.Ellipsis())])]), leading_lines=[])
    return node


def _with_comment(node: cst.CSTNode, comment: str, also_present: set[str] = frozenset()) -> cst.CSTNode:
    """``node`` with a plain comment line above it, once."""
    existing = {line.comment.value for line in node.leading_lines if line.comment is not None} | also_present
    if comment in existing:
        return node
    return node.with_changes(leading_lines=[*node.leading_lines, cst.EmptyLine(comment=cst.Comment(comment))])


def _with_todo_comments(node: cst.CSTNode, todos: list[Todo], also_present: set[str] = frozenset()) -> cst.CSTNode:
    existing = {line.comment.value for line in node.leading_lines if line.comment is not None} | also_present
    new = [
        cst.EmptyLine(comment=cst.Comment(t.comment()))
        for t in todos
        if t.comment() not in existing
    ]
    if not new:
        return node
    return node.with_changes(leading_lines=[*node.leading_lines, *new])


def todos_in(text: str) -> list[Todo]:
    """TODOs as they stand in the output, with their line numbers (the report's source)."""
    out = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if TODO_MARK not in line:
            continue
        match = TODO_LINE.search(line)
        if match:
            # the TODO is about the next line that is not itself a comment
            code_at = index + 1
            while code_at < len(lines) and lines[code_at].lstrip().startswith("#"):
                code_at += 1
            out.append(Todo(match["construct"].strip(), match["reason"].strip(), code_at + 1))
    return out


_GENERATED_NOTE = re.compile(r"# Generated by tern from rules/support/(\w+)\.py\.")


def _generated_support(module: cst.Module) -> set[int]:
    """The top-level definitions a previous run inlined from ``rules/support`` (by their note)."""
    noted = {match.group(1) for stmt in module.body for line in getattr(stmt, "leading_lines", ())
             if line.comment is not None for match in [_GENERATED_NOTE.match(line.comment.value)] if match}
    return {id(s) for s in module.body if isinstance(s, (cst.ClassDef, cst.FunctionDef)) and s.name.value in noted}


def insert_after_imports(module: cst.Module, stmts: list[cst.CSTNode]) -> cst.Module:
    body = list(module.body)
    at = 0
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and all(
            isinstance(s, (cst.Import, cst.ImportFrom)) or (isinstance(s, cst.Expr) and isinstance(s.value, cst.SimpleString))
            for s in stmt.body
        ):
            at = i + 1
        else:
            break
    body[at:at] = stmts
    return module.with_changes(body=body)


def package_helpers(module: cst.Module) -> frozenset[str]:
    """Names the module binds to its package's own code: what ``from . import x`` and
    ``from .m import f`` import, and its top-level functions."""
    names = set()
    for stmt in module.body:
        if isinstance(stmt, cst.FunctionDef):
            names.add(stmt.name.value)
        elif isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.ImportFrom) and small.relative and not isinstance(small.names, cst.ImportStar):
                    names.update((a.asname.name if a.asname else a.name).value for a in small.names
                                 if isinstance(a.asname.name if a.asname else a.name, cst.Name))
    return frozenset(names)


def keras_configs(module: cst.Module) -> dict[str, dict]:
    """Top-level names bound once, to a literal Keras config dict (``class_name`` and
    ``config`` keys): keras-cv's ``CONV_KERNEL_INITIALIZER = {"class_name": ...}``."""
    found: dict[str, dict] = {}
    bound: dict[str, int] = {}
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
                targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                for target in targets:
                    if isinstance(target, cst.Name):
                        bound[target.value] = bound.get(target.value, 0) + 1
                if isinstance(small, cst.Assign) and len(targets) == 1 and isinstance(targets[0], cst.Name):
                    try:
                        value = ast.literal_eval(code(small.value, module))
                    except (ValueError, SyntaxError):
                        continue
                    if isinstance(value, dict) and isinstance(value.get("class_name"), str) and isinstance(value.get("config", {}), dict):
                        found[targets[0].value] = value
    return {name: value for name, value in found.items() if bound[name] == 1}


def translate_module(
    module: cst.Module, *, is_test: bool = False, package: PackageInfo | None = None,
    tables: Tables | None = None, source: str | None = None, support_module: str = SUPPORT_MODULE,
) -> Translation:
    """``support_module``: the dotted name the file imports support definitions from (the
    package's generated module, ``tern/engine/support_module.py``)."""
    tables = tables or default_tables()
    plan = ImportPlan(tables.modules)
    canonical = Canonicalizer(tables.canonical)
    source = module.code if source is None else source
    if package is None:  # a lone file is its own package
        package = PackageInfo()
        scan_source(source, "", package, training_layer_names())
        close_over_bases(package)
    with indexed(module):  # rules ask about the original tree many times
        ctx = FileContext(
            tables=tables, package=package, scopes=Scopes({}, canonical, source_facts(source)),
            plan=plan, is_test=is_test, file_facts=_file_facts(source, package, tables),
            package_helpers=package_helpers(module), keras_configs=keras_configs(module), source=source,
        )
        out = transform(module, Translator(ctx))
    texts = ModuleTexts()
    generated = [ctx.value_table_statement(k) for k in sorted(ctx.value_tables)]
    if generated:
        out = insert_after_imports(out, generated)

    # the first statement's comments live in the module header
    header = {line.comment.value for line in out.header if line.comment is not None}

    def import_todo(stmt, construct, reason):
        return _with_todo_comments(stmt, [Todo(construct, reason)], header)

    allowed, kept_comment = frozenset(), None
    if ctx.kept_tf and tables.allowed:  # TF left on purpose: is that all an import is used for?
        reading = _read_kept(texts.code(out), package, tables)
        allowed = reading.bindings if reading is not None else frozenset()
        comment = "# " + tables.allowed[0].import_comment

        def kept_comment(stmt):
            return _with_comment(stmt, comment, header)

    if ctx.edits:
        final = finalize_imports(out, plan, import_todo, kept_comment, allowed, texts.code)
        for text in final.removed:
            ctx.edits.append(Edit("imports", text, ""))
        for text in final.added:
            ctx.edits.append(Edit("imports", "", text))
    else:
        final = finalize_imports(out, ImportPlan(()), import_todo, kept_comment, allowed, texts.code)
    out = final.module
    imported = _import_support(out, support_module, texts, final.names_read)
    out, support = imported.module, imported.names
    if imported.added:
        ctx.edits.append(Edit("imports", "", imported.added))
    text = imported.text if imported.text is not None else texts.code(out)
    uses = []
    if ctx.kept_tf:
        reading = _read_kept(text, package, tables)
        uses = list(reading.uses) if reading is not None else []
    return Translation(text, ctx.edits, todos_in(text), uses, notes=ctx.notes, support=support)


@dataclass(frozen=True)
class _SupportImport:
    module: cst.Module  # importing every support definition its code refers to and does not define
    names: tuple[str, ...]  # those definitions
    added: str  # the import's text when it is new, else ""
    text: str | None = None  # ``module.code`` when it was generated on the way (a whole-file codegen saved)


def _import_support(module: cst.Module, support_module: str, texts: ModuleTexts,
                    names_read: frozenset[str] | None = None) -> _SupportImport:
    """The module importing, from its package's support module, every support definition its
    code refers to and does not define itself.

    Found on the finished text rather than told by the rules, so a rerun (whose rules do not
    fire again) keeps exactly the import the first run wrote. ``names_read``: ``names_in_use``
    of a version of the module that differs from it in import statements only, when known
    (import statements read no name; the support import is one)."""
    previous = {code(s) for s in module.body if _imports_from(s, support_module)}
    body = [s for s in module.body if not _imports_from(s, support_module)]
    stripped = module.with_changes(body=body)
    text = texts.code(stripped)
    if not may_name(text, support_names()):  # a cheap test before parsing
        return _SupportImport(stripped, (), "", text)
    used = (names_in_use(text) if names_read is None else names_read) & support_names()
    used = sorted(used - _module_bound(parsed(text))) if used else []
    if not used:
        return _SupportImport(stripped, (), "", text)
    statement = import_statement(support_module, used)
    node = cst.parse_statement(statement)
    at = 0
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and all(
            isinstance(s, (cst.Import, cst.ImportFrom)) or (isinstance(s, cst.Expr) and isinstance(s.value, (cst.SimpleString, cst.ConcatenatedString)))
            for s in stmt.body
        ):
            at = i + 1
        else:
            break
    body.insert(at, node)
    new = statement not in previous
    return _SupportImport(stripped.with_changes(body=body), tuple(used), statement.strip() if new else "")


def _imports_from(stmt: cst.CSTNode, support_module: str) -> bool:
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.ImportFrom)
            and stmt.body[0].module is not None and dotted_name(stmt.body[0].module) == support_module)


def _module_bound(tree) -> set[str]:
    """Names the module binds at its top level (its own definitions win over support's)."""
    bound: set[str] = set()
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
            continue
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                todo.append(child)
            elif isinstance(child, ast.excepthandler):
                todo.extend(child.body)
                if child.name:
                    bound.add(child.name)
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
            targets = [node.target]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
        for target in targets:
            bound.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return bound


def _file_facts(source: str, package: PackageInfo, tables: Tables) -> dict[type, object]:
    """What each feature knows about this file (``Feature.file_facts``), by type."""
    found = (feature.file_facts(source, package, tables) for feature in features())
    return {type(facts): facts for facts in found if facts is not None}


def _read_kept(text: str, package: PackageInfo, tables: Tables) -> KeptTF | None:
    """The TF a translated text keeps on purpose, as the feature that keeps it reads it."""
    return next((r for r in (f.read_kept(text, package, tables) for f in features()) if r is not None), None)


def translate_source(source: str, *, is_test: bool = False, package: PackageInfo | None = None,
                     support_module: str = SUPPORT_MODULE) -> Translation:
    """Translate one file's source text (raises ``libcst.ParserSyntaxError`` if unparsable)."""
    return translate_module(cst.parse_module(source), is_test=is_test, package=package, source=source,
                            support_module=support_module)
