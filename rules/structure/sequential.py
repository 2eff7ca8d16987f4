"""``keras.Sequential([...])`` to Flax.

Without layers that depend on the training flag it becomes ``nn.Sequential([...])``
(stateless layers as lambdas). With ``Dropout``/``BatchNormalization`` inside,
``nn.Sequential`` cannot pass ``deterministic``/``use_running_average`` to them, so a
``return``/assignment of the Sequential inside a function becomes a local compact module
that applies the layers in order with the training flag; elsewhere it is left with a TODO.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.convert import Refusal
from tern.layers import apply_stateless, call_arguments
from tern.modulegen import class_name_for, compact_module
from tern.records import DROP
from tern.render import commas
from tern.rule import Rule

SEQUENTIAL = {"keras.Sequential", "keras.models.Sequential"}
INPUTS = {"keras.Input", "keras.layers.Input", "keras.layers.InputLayer"}


def _elements(ctx, original: cst.Call, updated: cst.Call):
    """[(original element, updated element)] of the layer list, or a Refusal."""
    if not original.args or original.args[0].keyword not in (None,) and original.args[0].keyword.value != "layers":
        return Refusal("Sequential without a literal layer list (use of `.add`)")
    orig_list, new_list = original.args[0].value, updated.args[0].value
    if not isinstance(orig_list, (cst.List, cst.Tuple)) or not isinstance(new_list, (cst.List, cst.Tuple)):
        return Refusal("Sequential layers are not a literal list")
    pairs = []
    for o, n in zip(orig_list.elements, new_list.elements):
        if isinstance(o.value, cst.Call) and ctx.resolve(o.value.func) in INPUTS:
            continue  # Keras 3 style shape declaration: Flax infers shapes
        pairs.append((o.value, n.value))
    return pairs


def _record(ctx, node: cst.BaseExpression):
    if isinstance(node, cst.Call):
        name = ctx.resolve(node.func)
        return ctx.tables.layers.get(name) if name else None
    return None


def _needs_training(record) -> bool:
    return record is not None and record.call.get("training", DROP) != DROP


class SequentialRule(Rule):
    id = "structure:sequential"
    consumes = frozenset(SEQUENTIAL | INPUTS)
    order = 30

    def leave_call(self, ctx, original, updated):
        if ctx.resolve(original.func) not in SEQUENTIAL:
            return None
        pairs = _elements(ctx, original, updated)
        if isinstance(pairs, Refusal):
            ctx.todo("keras.Sequential", pairs.reason)
            return None
        for o, _ in pairs:
            if _record(ctx, o) is None and not (isinstance(o, cst.Call) and isinstance(o.func, cst.Name) and ctx.package.is_module_class(o.func.value)):
                ctx.todo("keras.Sequential", f"element `{cst.Module([]).code_for_node(o)}` is not a known layer")
                return None
        if any(_needs_training(_record(ctx, o)) for o, _ in pairs):
            frame = ctx.frame
            if frame is not None and not frame.in_module_method:
                frame.tags.add("sequential")
                return None  # leave_function builds a module class
            ctx.todo("keras.Sequential", "contains training-dependent layers; nn.Sequential cannot pass the training flag")
            return None
        elements = [cst.Element(n) for _, n in pairs]
        elements = [e.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) if i < len(elements) - 1 else e for i, e in enumerate(elements)]
        return cst.Call(func=ctx.target_name("flax.linen.Sequential"), args=[cst.Arg(cst.List(elements))])

    def leave_function(self, ctx, original, updated):
        if "sequential" not in ctx.frame.tags:
            return None
        stmts, new = list(original.body.body), list(updated.body.body)
        if len(stmts) != len(new):
            return None
        out = []
        changed = False
        for o, n in zip(stmts, new):
            call_o = _sequential_value(ctx, o)
            if call_o is None:
                out.append(n)
                continue
            call_n = n.body[0].value
            built = self._module(ctx, original.name.value, call_o, call_n)
            if isinstance(built, Refusal):
                ctx.todo("keras.Sequential", built.reason)
                out.append(n)
                continue
            cls, name = built
            out.append(cls)
            out.append(n.with_changes(body=[n.body[0].with_changes(value=cst.Call(func=cst.Name(name)))]))
            changed = True
        if not changed:
            return None
        return updated.with_changes(body=updated.body.with_changes(body=out))

    def _module(self, ctx, fn_name, call_o, call_n):
        pairs = _elements(ctx, call_o, call_n)
        if isinstance(pairs, Refusal):
            return pairs
        name_arg = next((a.value for a in call_o.args if a.keyword and a.keyword.value == "name"), None)
        literal = name_arg.evaluated_value if isinstance(name_arg, cst.SimpleString) else None
        cls_name = class_name_for(fn_name, literal)
        body = [cst.parse_statement("x = inputs\n")]
        for o, n in pairs:
            stateless = ctx.stateless.get(id(o))
            if stateless is not None:
                value = apply_stateless(ctx, stateless, cst.Name("x"))
            else:
                record = _record(ctx, o)
                fake = cst.Call(func=cst.Name("_"), args=[cst.Arg(cst.Name("x"))])
                if record is not None:
                    args = call_arguments(ctx, record, fake, "training")
                else:  # a package module: pass the flag on, as Keras does
                    args = [cst.Arg(cst.Name("x")), cst.Arg(cst.Name("training"), keyword=cst.Name("training"))]
                value = args if isinstance(args, Refusal) else cst.Call(func=n, args=commas(args))
            if isinstance(value, Refusal):
                return value
            body.append(cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name("x"))], value)]))
        body.append(cst.parse_statement("return x\n"))
        return compact_module(ctx, cls_name, ["inputs"], body, f"Keras Sequential model from `{fn_name}`, as a Flax module."), cls_name


def _sequential_value(ctx, stmt):
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Return) or m.matches(small, m.Assign(targets=[m.AssignTarget(target=m.Name())])):
        value = small.value
        if isinstance(value, cst.Call) and ctx.resolve(value.func) in SEQUENTIAL:
            return value
    return None


RULE = SequentialRule()
