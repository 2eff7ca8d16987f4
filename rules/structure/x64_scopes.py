"""A function that computes in float64 or int64 runs under ``jax.enable_x64``.

TF code casts to 64 bits where 32 are not enough (``tf.cast(d, tf.float64)`` "to avoid
precision error in offset", then back to the input's dtype). JAX has 64-bit types only
with x64 enabled; otherwise ``jnp.float64`` silently gives float32, which is why 64-bit
dtypes are a TODO elsewhere. Scoped, ``with jax.enable_x64(True):`` computes in 64 bits
in eager code and inside ``jit`` alike, and leaves the rest of the program in 32.

Enabling x64 also widens JAX's defaults: ``jnp.zeros(n)`` becomes float64, ``jnp.arange``
int64, a random draw float64, where TF's stay 32-bit. So a function's body is wrapped only
when every call in it keeps its inputs' dtypes or names one: TF ops from ``PRESERVING``
and a few builtins. A call to anything else (the package's helpers, a layer, a method, a
constructor such as ``tf.zeros``) could create a value with a default dtype, and keeps the
function as it was, with its TODOs. TF's own 64-bit results (``tf.math.argmax``'s int64,
``truediv`` of ints) come out 64-bit here too.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.rule import Rule
from tern.engine.walk import findall

#: TF ops whose result dtype is their inputs' or the one they are given (canonical sources)
PRESERVING = frozenset({
    "tensorflow.cast", "tensorflow.reshape", "tensorflow.transpose", "tensorflow.concat", "tensorflow.stack",
    "tensorflow.squeeze", "tensorflow.expand_dims", "tensorflow.shape", "tensorflow.rank", "tensorflow.gather",
    "tensorflow.where", "tensorflow.zeros_like", "tensorflow.ones_like", "tensorflow.clip_by_value",
    "tensorflow.linalg.matmul", "tensorflow.math.argmax", "tensorflow.math.argmin",
    *(f"tensorflow.math.{op}" for op in (
        "abs", "exp", "log", "sqrt", "rsqrt", "square", "pow", "maximum", "minimum", "sign", "add", "subtract",
        "multiply", "divide", "truediv", "floordiv", "floormod", "negative", "logical_and", "logical_or",
        "logical_not", "equal", "not_equal", "greater", "greater_equal", "less", "less_equal", "reduce_sum",
        "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_any", "reduce_all")),
})
#: builtins that make no arrays
BUILTINS = frozenset({"int", "float", "bool", "len", "isinstance", "min", "max", "abs", "range", "tuple", "list",
                      "zip", "enumerate", "ValueError", "TypeError"})
NOTE = "# TF computes this function's 64-bit values in 64 bits; JAX only with x64 enabled"


class X64ScopesRule(Rule):
    id = "structure:x64-scopes"
    order = 58

    def visit_function(self, ctx, node: cst.FunctionDef) -> None:
        if ctx.scopes.imports_source and isinstance(node.body, cst.IndentedBlock) \
                and ctx.mentions(*_x64_words(ctx.tables)) and _uses_64_bits(ctx, node) and _keeps_dtypes(ctx, node):
            ctx.frame.tags.add("x64")
            ctx.rule_state.setdefault(self.id, set()).add(id(node))

    def leave_function(self, ctx, original, updated):
        if id(original) not in ctx.rule_state.get(self.id, ()):
            return None
        body = list(updated.body.body)
        doc = [body.pop(0)] if body and m.matches(body[0], m.SimpleStatementLine(body=[m.Expr(m.SimpleString())])) else []
        scope = cst.With(
            items=[cst.WithItem(cst.Call(ctx.target_name("jax.enable_x64"), [cst.Arg(cst.Name("True"))]))],
            body=cst.IndentedBlock(body),
            leading_lines=[cst.EmptyLine(comment=cst.Comment(NOTE))],
        )
        return updated.with_changes(body=updated.body.with_changes(body=[*doc, scope]))


_X64_WORDS: dict[int, tuple[object, frozenset[str]]] = {}  # id(tables) -> (the tables, held so the id stays theirs; words)


def _x64_words(tables) -> frozenset[str]:
    """The last parts of the 64-bit dtypes' names (``float64``, ``double``): a file that spells
    none of them names none of them."""
    held = _X64_WORDS.get(id(tables))
    if held is None:
        held = _X64_WORDS[id(tables)] = (tables, frozenset(name.rsplit(".", 1)[-1] for name, r in tables.api.items() if r.x64))
    return held[1]


def _uses_64_bits(ctx, fn: cst.FunctionDef) -> bool:
    for node in findall(fn.body, m.Attribute()):
        record = ctx.tables.api.get(ctx.resolve(node) or "")
        if record is not None and record.x64:
            return True
    return False


def _keeps_dtypes(ctx, fn: cst.FunctionDef) -> bool:
    """Every call in the body keeps or names its dtypes; no nested scopes, no generators."""
    if findall(fn.body, m.FunctionDef() | m.ClassDef() | m.Lambda() | m.Yield() | m.GeneratorExp()
                 | m.ListComp() | m.SetComp() | m.DictComp()):
        return False
    for call in findall(fn.body, m.Call()):
        if isinstance(call.func, cst.Name) and call.func.value in BUILTINS and ctx.resolve(call.func) is None:
            continue
        record = ctx.tables.api.get(ctx.resolve(call.func) or "")
        if record is None or record.source not in PRESERVING:
            return False
    return True


RULE = X64ScopesRule()
