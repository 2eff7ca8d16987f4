"""Functional Keras models (``keras.Input`` ... ``keras.Model(inputs, outputs)``) become a
local ``nn.Module`` whose compact ``__call__`` replays the graph.

The statements between the first ``Input`` and the ``Model(...)`` call are the graph;
they move into ``__call__`` unchanged (layer constructors there are already Flax), the
``Input`` variables become its parameters, and the model's outputs its return value.
Statements before stay outside (the class closes over them). Keras propagates the
training flag to every layer; the generated ``__call__`` takes ``training`` and the layer
calls inside were given it explicitly.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.context import LayerRef
from tern.engine.modulegen import class_name_for, compact_module
from tern.engine.names import short_name
from tern.engine.nodes import assigns_a_call_to_a_name
from tern.engine.rule import Rule
from tern.engine.walk import findall, walk

INPUTS = {"keras.Input", "keras.layers.Input"}
MODELS = {"keras.Model", "keras.models.Model"}
SEQUENTIALS = {"keras.Sequential", "keras.models.Sequential"}


def _calls_in(node: cst.CSTNode, ctx, names: set[str]) -> set[str]:
    """Which of ``names`` the node calls (one walk)."""
    calls = _Calls(ctx, names)
    walk(node, calls)
    return calls.found


class _Calls(cst.CSTVisitor):
    def __init__(self, ctx, names: set[str]):
        self.ctx, self.names, self.found = ctx, names, set()

    def visit_Call(self, call: cst.Call) -> None:
        name = self.ctx.resolve(call.func)
        if name in self.names:
            self.found.add(name)


def _input_target(stmt: cst.CSTNode, ctx) -> str | None:
    if m.matches(stmt, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(target=m.Name())], value=m.Call())])):
        assign = stmt.body[0]
        if ctx.resolve(assign.value.func) in INPUTS:
            return assign.targets[0].target.value
    return None


def _model_call(stmt: cst.CSTNode, ctx) -> cst.Call | None:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    value = None
    if isinstance(small, cst.Return):
        value = small.value
    elif m.matches(small, m.Assign(targets=[m.AssignTarget(target=m.Name())])):
        value = small.value
    if isinstance(value, cst.Call) and ctx.resolve(value.func) in MODELS:
        return value
    return None


def _model_args(call: cst.Call) -> dict[str, cst.BaseExpression]:
    out = {}
    for i, arg in enumerate(call.args):
        key = arg.keyword.value if arg.keyword else ("inputs", "outputs", "name")[i] if i < 3 else f"_{i}"
        out[key] = arg.value
    return out


class FunctionalModelRule(Rule):
    id = "structure:functional-model"
    consumes = frozenset(INPUTS | MODELS)
    order = 20

    def visit_function(self, ctx, node):
        frame = ctx.frame
        for stmt in node.body.body:
            if assigns_a_call_to_a_name(stmt):
                assign = stmt.body[0]
                name = ctx.resolve(assign.value.func)
                if name in ctx.tables.layers:
                    frame.layers[assign.targets[0].target.value] = LayerRef(record=ctx.tables.layers[name])
        if node.name.value not in ctx.package.model_builders:
            if not ctx.mentions("Input", "Sequential"):
                return  # nothing in the file can call them
            found = _calls_in(node.body, ctx, INPUTS | SEQUENTIALS)
            if found and found <= INPUTS:
                frame.tags.add("stray_inputs")
                # keyed by the frame object's id while it is alive: every stray-inputs frame writes its own entry
                ctx.rule_state.setdefault("symbolic_why", {})[id(frame)] = \
                    _why_symbolic(node) if ctx.is_test else "outside tests"
            return  # the package pre-pass saw no Model(...) call in it: skip the walk
        called = _calls_in(node.body, ctx, INPUTS | MODELS)
        if called & INPUTS and called & MODELS:
            frame.tags.add("functional")
            frame.training = "training"

    def leave_call(self, ctx, original, updated):
        """An ``Input`` in a function that builds no model (a test feeding symbolic tensors to a
        layer) stays Keras: it says so, as nothing else will translate it."""
        if (ctx.frame is not None and "stray_inputs" in ctx.frame.tags and ctx.is_test
                and ctx.rule_state.get("symbolic_why", {}).get(id(ctx.frame)) is None
                and _batch_free_comparison(updated) is not None):
            return _known_dimensions(updated)
        if ctx.frame is not None and "stray_inputs" in ctx.frame.tags and ctx.resolve(original.func) in INPUTS:
            construct = short_name(ctx.resolve(original.func))
            why = ctx.rule_state.get("symbolic_why", {}).get(id(ctx.frame))
            if why is None:
                out = _concrete_input(ctx, updated)
                if not isinstance(out, str):
                    return out
                why = out
            if why == "outside tests":
                ctx.todo(construct, "a symbolic Keras tensor in a function that builds no "
                         "model: Flax modules take arrays (call the layer on an array of that shape)")
            else:
                ctx.todo(construct, f"a symbolic Keras tensor (unknown batch dimension) in a test that builds no model: {why}")
        return None

    def leave_function(self, ctx, original, updated):
        if "functional" not in ctx.frame.tags:
            return None
        stmts = list(original.body.body)
        new = list(updated.body.body)
        if len(stmts) != len(new):
            ctx.todo(f"functional model {original.name.value}", "statements were restructured by another rule")
            return None
        inputs_at = [i for i, s in enumerate(stmts) if _input_target(s, ctx)]
        model_at = [i for i, s in enumerate(stmts) if _model_call(s, ctx) is not None]
        if not inputs_at or len(model_at) != 1 or model_at[0] < inputs_at[-1]:
            ctx.todo(
                f"functional model {original.name.value}",
                "inputs and the Model(...) call must be top-level statements of this function, Inputs first",
            )
            return None
        first, at = inputs_at[0], model_at[0]
        args = _model_args(_model_call(new[at], ctx))
        model_inputs, outputs = args.get("inputs"), args.get("outputs")
        if model_inputs is None or outputs is None:
            ctx.todo(f"functional model {original.name.value}", "Model(...) without inputs and outputs")
            return None
        if isinstance(model_inputs, cst.Name):
            params, prelude = [model_inputs.value], []
        elif isinstance(model_inputs, (cst.List, cst.Tuple)) and all(isinstance(e.value, cst.Name) for e in model_inputs.elements):
            names = [e.value.value for e in model_inputs.elements]
            params = ["inputs"]
            prelude = [cst.parse_statement(f"{', '.join(names)}, = inputs\n" if len(names) == 1 else f"{', '.join(names)} = inputs\n")]
        else:
            ctx.todo(f"functional model {original.name.value}", "dict or nested model inputs are not supported")
            return None
        graph = [s for i, s in enumerate(new[first:at], start=first) if i not in inputs_at]
        specs = _input_specs(ctx, [stmts[i] for i in inputs_at], model_inputs)
        body = [*prelude, *graph, cst.SimpleStatementLine([cst.Return(outputs)])]
        model_name = args.get("name")
        literal = model_name.evaluated_value if isinstance(model_name, cst.SimpleString) else None
        cls_name = class_name_for(original.name.value, literal)
        cls = compact_module(ctx, cls_name, params, body, f"Functional Keras model `{original.name.value}`, replayed as a Flax module.")
        if specs is not None:
            # Keras builds a functional model from its Inputs at construction; keep the
            # specs so callers (translated tests) can build variables before a first call.
            spec_stmt = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name("tern_input_specs"))], specs)])
            cls = cls.with_changes(body=cls.body.with_changes(body=[cls.body.body[0], spec_stmt, *cls.body.body[1:]]))
        instance = cst.Call(func=cst.Name(cls_name))
        small = new[at].body[0]
        if isinstance(small, cst.Return):
            end = new[at].with_changes(body=[small.with_changes(value=instance)])
        else:
            end = new[at].with_changes(body=[small.with_changes(value=instance)])
        tail = []
        model_var = small.targets[0].target.value if isinstance(small, cst.Assign) else None
        for stmt in new[at + 1:]:
            if model_var and _uses_method_of(stmt, model_var):
                stmt = stmt.with_changes(leading_lines=[*stmt.leading_lines, cst.EmptyLine(comment=cst.Comment(
                    f"# TODO(tern): keras.Model method: `{model_var}.<method>` has no flax.linen counterpart (training code is translated separately)"))])
            tail.append(stmt)
        body_out = [*new[:first], cls, end, *tail]
        return updated.with_changes(body=updated.body.with_changes(body=body_out))


def _input_specs(ctx, input_stmts, model_inputs):
    """``((shape, dtype),)`` for one input, ``[...]`` for a list; None when not literal enough."""
    by_name = {}
    for stmt in input_stmts:
        assign = stmt.body[0]
        call = assign.value
        args = {}
        for i, arg in enumerate(call.args):
            key = arg.keyword.value if arg.keyword else ("shape", "batch_size", "dtype")[i] if i < 3 else "_"
            args[key] = arg.value
        shape = args.get("shape")
        if shape is None:
            return None
        dtype = args.get("dtype", cst.SimpleString('"float32"'))
        by_name[assign.targets[0].target.value] = cst.Tuple([
            cst.Element(shape, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), cst.Element(dtype),
        ])
    if isinstance(model_inputs, cst.Name):
        return by_name.get(model_inputs.value)
    elements = [by_name.get(e.value.value) for e in model_inputs.elements]
    if any(e is None for e in elements):
        return None
    return cst.List([
        cst.Element(e, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")) if i < len(elements) - 1 else cst.MaybeSentinel.DEFAULT)
        for i, e in enumerate(elements)
    ])


#: the batch a symbolic Input's unknown (None) dimension becomes in a test: 2, not 1, so that a layer cannot
#: squeeze or broadcast the batch away where Keras' unknown dimension would have stayed
CONCRETE_BATCH = 2
WIDE_DTYPES = {"float64", "int64", "uint64", "complex128"}


def _why_symbolic(fn: cst.FunctionDef) -> str | None:
    """Why the test may observe the batch dimension Keras leaves unknown (None), or None when it cannot: every
    ``.shape`` it reads is indexed by a literal int >= 1 (a known dimension, equal on both sides) and it takes no
    ``len``. Then an array with a concrete batch in place of each Input leaves every assertion meaning the same."""
    parents = findall(fn, m.Subscript(value=m.Attribute(attr=m.Name("shape"))))
    compared = {id(call.args[at].value) for call in findall(fn, m.Call())
                if (at := _batch_free_comparison(call)) is not None}
    for node in findall(fn, m.Attribute(attr=m.Name("shape"))):
        if id(node) in compared:
            continue  # compared with [None, ...]: the known dimensions are compared instead (leave_call)
        indexed = [p for p in parents if p.value is node]
        if len(indexed) != 1:
            return ("it reads a whole shape (`.shape`), where Keras has None for the batch and an array a number "
                    "(e.g. `output.shape == [None, 16, 16, 256]`): compare the known dimensions `shape[1:]` instead")
        sub = indexed[0].slice
        index = sub[0].slice if len(sub) == 1 and isinstance(sub[0].slice, cst.Index) else None
        if index is None or not isinstance(index.value, cst.Integer) or int(index.value.value) < 1:
            return "it reads a dimension that may be the batch (`.shape[0]`, a negative or computed index, a slice)"
    if findall(fn, m.Call(func=m.Name("len"))):
        return "it takes `len(...)`, which may count the batch Keras leaves unknown"
    return None


_EQUALITY_ASSERTS = m.Name("assertEqual") | m.Name("assertEquals") | m.Name("assertAllEqual") | \
    m.Name("assertListEqual") | m.Name("assertTupleEqual") | m.Name("assertSequenceEqual")


def _batch_free_comparison(call: cst.CSTNode) -> int | None:
    """Which argument of ``self.assertEqual(x.shape, [None, 16, 256])`` (either order) is the
    shape read, or None: the test states the batch is unknown, and says nothing else about it."""
    if not m.matches(call, m.Call(func=m.Attribute(value=m.Name("self"), attr=_EQUALITY_ASSERTS))) or len(call.args) < 2:
        return None
    first, second = call.args[0].value, call.args[1].value
    for at, (shape, literal) in enumerate(((first, second), (second, first))):
        if (m.matches(shape, m.Attribute(attr=m.Name("shape"))) and isinstance(literal, (cst.List, cst.Tuple))
                and literal.elements and m.matches(literal.elements[0].value, m.Name("None"))):
            return at
    return None


def _known_dimensions(call: cst.Call) -> cst.Call:
    """``self.assertEqual(x.shape, [None, 16])`` -> ``self.assertEqual(x.shape[1:], (16,))``: the
    array in place of the Input has a concrete batch, the rest of the shape is Keras's."""
    at = _batch_free_comparison(call)
    shape, literal = call.args[at].value, call.args[1 - at].value
    rest = list(literal.elements[1:])  # a tuple, as a JAX shape is (TF's TensorShape also equalled a list)
    if len(rest) == 1:
        rest = [rest[0].with_changes(comma=cst.Comma())]
    elif rest:
        rest[-1] = rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    known = cst.Subscript(value=shape, slice=[cst.SubscriptElement(cst.Slice(lower=cst.Integer("1"), upper=None))])
    args = list(call.args)
    args[at] = args[at].with_changes(value=known)
    args[1 - at] = args[1 - at].with_changes(value=cst.Tuple(rest))
    return call.with_changes(args=args)


def _concrete_input(ctx, call: cst.Call) -> cst.BaseExpression | str:
    """``jnp.zeros((CONCRETE_BATCH, *shape), dtype)`` for ``keras.Input(shape[, batch_size][, dtype][, name])``, or why not."""
    args = {}
    for i, arg in enumerate(call.args):
        key = arg.keyword.value if arg.keyword else ("shape", "batch_size", "dtype")[i] if i < 3 else "_"
        args[key] = arg.value
    if set(args) - {"shape", "batch_size", "dtype", "name"}:
        return f"arguments {sorted(set(args) - {'shape', 'batch_size', 'dtype', 'name'})} have no array counterpart"
    shape = args.get("shape")
    if not isinstance(shape, (cst.List, cst.Tuple)) or not all(isinstance(e.value, cst.Integer) for e in shape.elements):
        return "the shape is not a literal list of ints (a None dimension stays unknown in Keras)"
    batch = args.get("batch_size")
    if batch is not None and not isinstance(batch, cst.Integer):
        return "batch_size is not a literal int"
    dtype = args.get("dtype")
    if isinstance(dtype, cst.SimpleString) and dtype.evaluated_value in WIDE_DTYPES:
        return f"dtype {dtype.evaluated_value}: JAX is 32-bit unless jax_enable_x64 is on"
    dims = [batch.value if batch is not None else str(CONCRETE_BATCH), *(e.value.value for e in shape.elements)]
    code = f"jax.numpy.zeros(({', '.join(dims)}{',' if len(dims) == 1 else ''}), dtype=__dtype__)"
    out = cst.parse_expression(code)
    dtype_node = dtype if dtype is not None else ctx.target_name("jax.numpy.float32")  # Keras' floatx
    out = out.with_changes(
        func=ctx.target_name("jax.numpy.zeros"),
        args=[out.args[0], out.args[1].with_changes(value=dtype_node)],
    )
    return out


def _uses_method_of(stmt: cst.CSTNode, var: str) -> bool:
    """Whether ``stmt`` reads an attribute of the name ``var``."""
    return any(m.matches(node.value, m.Name(var)) for node in findall(stmt, m.Attribute()))


RULE = FunctionalModelRule()
