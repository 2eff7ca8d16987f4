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

from tern.engine.dispatch import CachedHooks
from tern.engine.layers import apply_stateless, call_arguments
from tern.engine.modulegen import class_name_for, compact_module
from tern.engine.records import DROP
from tern.engine.render import commas
from tern.engine.results import Refusal, code
from tern.engine.rule import Rule
from tern.engine.templates import expand_template
from tern.engine.walk import findall
from tern.engine.transform import transform

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


#: targets whose training flag KerasSequential (rules/support) passes in Flax's spelling
FLAGGED = {"flax.linen.BatchNorm", "flax.linen.Dropout"}


def _as_tuple(pairs, updated: cst.Call) -> cst.Tuple:
    """The layer list as a tuple display laid out as written (Flax module fields are tuples)."""
    listed = updated.args[0].value
    kept = {id(n) for _, n in pairs}
    elements = [e for e in listed.elements if id(e.value) in kept]
    if len(elements) == 1 and not isinstance(elements[0].comma, cst.Comma):
        elements[0] = elements[0].with_changes(comma=cst.Comma())
    return cst.Tuple(elements, lpar=[cst.LeftParen(whitespace_after=listed.lbracket.whitespace_after)],
                     rpar=[cst.RightParen(whitespace_before=listed.rbracket.whitespace_before)])


def _keras_name(ctx, node: cst.BaseExpression) -> bool:
    """A TF/Keras name with no layer record (``layers.Resizing(...)``): not the package's own."""
    func = node.func if isinstance(node, cst.Call) else node
    return ctx.resolve(func) is not None


def _needs_training(record) -> bool:
    return record is not None and record.call.get("training", DROP) != DROP


class SequentialRule(Rule):
    id = "structure:sequential"
    consumes = frozenset(SEQUENTIAL | INPUTS)
    order = 30

    def leave_call(self, ctx, original, updated):
        if ctx.resolve(original.func) not in SEQUENTIAL:
            return None
        frame = ctx.frame
        if _list_variable(original) is not None and frame is not None and not frame.in_module_method:
            frame.tags.add("sequential")
            return None  # a layer list built at run time: leave_function builds a module class
        pairs = _elements(ctx, original, updated)
        if isinstance(pairs, Refusal):
            ctx.todo("keras.Sequential", pairs.reason)
            return None
        package_layers = False
        for o, _ in pairs:
            if _record(ctx, o) is None and not (isinstance(o, cst.Call) and isinstance(o.func, cst.Name) and ctx.package.is_module_class(o.func.value)):
                if _keras_name(ctx, o):
                    ctx.todo("keras.Sequential", f"element `{code(o)}` is not a known layer")
                    return None
                package_layers = True  # the package's own block (a helper's result): it may take the flag
        if package_layers or any(_needs_training(_record(ctx, o)) for o, _ in pairs):
            frame = ctx.frame
            if not package_layers and frame is not None and not frame.in_module_method:
                frame.tags.add("sequential")
                return None  # leave_function builds a module class
            unknown = [o for o, _ in pairs if _needs_training(_record(ctx, o)) and _record(ctx, o).target not in FLAGGED]
            if unknown:
                ctx.todo("keras.Sequential", f"`{code(unknown[0])}` takes the training flag in a "
                         "form KerasSequential does not pass")
                return None
            return cst.Call(func=expand_template("{support:KerasSequential}", {}, ctx), args=[cst.Arg(_as_tuple(pairs, updated))])
        elements = [cst.Element(n) for _, n in pairs]
        elements = [e.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) if i < len(elements) - 1 else e for i, e in enumerate(elements)]
        built = cst.Call(func=ctx.target_name("flax.linen.Sequential"), args=[cst.Arg(cst.List(elements))])
        spec = _input_spec(ctx, original.args[0].value)
        if ctx.is_test and spec is not None:
            # Keras builds a model declared with an Input at construction; tests may read or
            # train its variables before calling it (testing/module_calls.py's registry)
            return cst.Call(func=cst.Name("_tern_built"), args=[
                cst.Arg(built, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), cst.Arg(spec)])
        if spec is not None:  # package code: the caller (a test, the trainer) builds it from the specs
            return cst.Call(func=cst.Name("keras_with_input_specs"), args=[
                cst.Arg(built, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), cst.Arg(spec)])
        return built

    def leave_function(self, ctx, original, updated):
        if "sequential" not in ctx.frame.tags:
            return None
        stmts, new = list(original.body.body), list(updated.body.body)
        if len(stmts) != len(new):
            return None
        out = []
        changed = False
        lists = {_list_variable(c) for c in map(lambda st: _sequential_value(ctx, st), stmts) if c is not None} - {None}
        specs = None
        if lists:
            new, specs = _inputs_out_of_lists(ctx, stmts, new, lists)
        for o, n in zip(stmts, new):
            call_o = _sequential_value(ctx, o)
            if call_o is None:
                out.append(n)
                continue
            call_n = n.body[0].value
            if _list_variable(call_o) is not None:
                built = self._dynamic_module(ctx, original.name.value, call_o, specs)
            else:
                built = self._module(ctx, original.name.value, call_o, call_n)
            if isinstance(built, Refusal):
                ctx.todo("keras.Sequential", built.reason)
                out.append(n)
                continue
            cls, instance = built
            out.append(cls)
            out.append(n.with_changes(body=[n.body[0].with_changes(value=instance)]))
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
        cls = compact_module(ctx, cls_name, ["inputs"], body, f"Keras Sequential model from `{fn_name}`, as a Flax module.")
        return cls, cst.Call(func=cst.Name(cls_name))

    def _dynamic_module(self, ctx, fn_name, call_o, specs):
        """``Sequential(layers)`` over a list built at run time: the layers become a field and
        the call dispatches the training flag by layer type, as Keras does implicitly."""
        name_arg = next((a.value for a in call_o.args if a.keyword and a.keyword.value == "name"), None)
        literal = name_arg.evaluated_value if isinstance(name_arg, cst.SimpleString) else None
        cls_name = class_name_for(fn_name, literal)
        branches = _training_dispatch(ctx)
        lines = ["x = inputs\n", "for layer in self.layers:\n", "    if layer is None:\n", "        continue  # keras.Input: Flax infers shapes\n"]
        keyword = "if"
        for target, kwarg in branches:
            lines.append(f"    {keyword} isinstance(layer, {target}):\n        x = layer(x, {kwarg})\n")
            keyword = "elif"
        lines.append("    else:\n        x = layer(x)\n" if branches else "    x = layer(x)\n")
        lines.append("return x\n")
        body = list(cst.parse_module("".join(lines)).body)
        from tern.engine.targets import respell

        body = [respell(b, ctx.plan) for b in body]
        cls = compact_module(ctx, cls_name, ["inputs"], body,
                             f"Keras Sequential model from `{fn_name}` (a layer list built at run time), as a Flax module.")
        ctx.plan.spell("typing")
        field = cst.parse_statement("layers: typing.Any\n")
        extra = [field]
        if specs is not None:
            extra.append(cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name("tern_input_specs"))], specs)]))
        cls = cls.with_changes(body=cls.body.with_changes(body=[cls.body.body[0], *extra, *cls.body.body[1:]]))
        layers = call_o.args[0].value
        instance = cst.Call(func=cst.Name(cls_name), args=[cst.Arg(cst.Call(func=cst.Name("tuple"), args=[cst.Arg(layers)]))])
        return cls, instance


def _training_dispatch(ctx) -> list[tuple[str, str]]:
    """(flax class, call keyword) for every table layer whose call takes the training flag."""
    out = {}
    for record in ctx.tables.layers.values():
        template = record.call.get("training", DROP)
        if template == DROP or record.target is None:
            continue
        keyword, _, expr = template.partition("=")
        expr = expr.strip().replace("{training}", "training")
        out.setdefault(record.target, f"{keyword.strip()}={expr}")
    return sorted(out.items())


def _input_spec(ctx, layers: cst.BaseExpression) -> cst.Tuple | None:
    """``(shape, dtype)`` of the first ``keras.Input`` in a literal layer list, if any."""
    if not isinstance(layers, (cst.List, cst.Tuple)):
        return None
    for element in layers.elements:
        if isinstance(element.value, cst.Call) and ctx.resolve(element.value.func) in INPUTS:
            args = {}
            for i, arg in enumerate(element.value.args):
                args[arg.keyword.value if arg.keyword else ("shape", "batch_size", "dtype")[i] if i < 3 else "_"] = arg.value
            if "shape" not in args:
                return None
            return cst.Tuple([
                cst.Element(args["shape"], comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                cst.Element(args.get("dtype", cst.SimpleString('"float32"'))),
            ])
    return None


def becomes_nn_sequential(ctx, call: cst.Call) -> bool:
    """Whether ``SequentialRule.leave_call`` makes this call an ``nn.Sequential`` of the same layers: a
    literal list of known layers, none taking the training flag. Keras' ``model.layers[i]`` is then the
    list's element ``i`` (an Input is a layer of neither), Flax name ``layers_i``."""
    if ctx.resolve(call.func) not in SEQUENTIAL or _list_variable(call) is not None:
        return False
    pairs = _elements(ctx, call, call)
    return not isinstance(pairs, Refusal) and all(
        (_record(ctx, o) is not None and not _needs_training(_record(ctx, o)))
        or (isinstance(o, cst.Call) and isinstance(o.func, cst.Name) and ctx.package.is_module_class(o.func.value))
        for o, _ in pairs)


def _list_variable(call: cst.Call) -> str | None:
    if call.args and call.args[0].keyword in (None,) and isinstance(call.args[0].value, cst.Name):
        return call.args[0].value.value
    return None


def _inputs_out_of_lists(ctx, stmts, new, lists):
    """``keras.Input(...)`` elements of the layer lists become ``None`` (skipped: Flax infers
    shapes); the first one's shape and dtype become the model's ``tern_input_specs``."""
    specs = None
    out = []
    for o, n in zip(stmts, new):
        if not any(_mentions(o, name) for name in lists):
            out.append(n)
            continue
        found = []

        class Replace(CachedHooks):
            def leave_Call(self, original, updated):
                if ctx.resolve(original.func) in INPUTS:
                    found.append(original)
                    return cst.Name("None")
                return updated

        out.append(transform(n, Replace()))
        if found and specs is None:
            args = {}
            for i, arg in enumerate(found[0].args):
                args[arg.keyword.value if arg.keyword else ("shape", "batch_size", "dtype")[i] if i < 3 else "_"] = arg.value
            if "shape" in args:
                specs = cst.Tuple([
                    cst.Element(args["shape"], comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                    cst.Element(args.get("dtype", cst.SimpleString('"float32"'))),
                ])
    return out, specs


def _mentions(stmt, name: str) -> bool:
    return any(node.value == name for node in findall(stmt, m.Name()))


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
