"""Keras' and TF's test-mode decorators, for a framework with one mode.

``@run_all_keras_modes`` (``keras_parameterized``, ``test_combinations``), ``@run_v2_only``,
``@run_in_graph_and_eager_modes`` and ``@combinations.generate(combinations.combine(mode=[...]))``
run a test once per TF execution mode (TF1 graph and session, eager, eager inside
tf.function). JAX has one mode, eager with jit where the code asks for it, so the
decorator is dropped when the eager run is among the modes and the decorator adds no test
parameter: the test then runs once, as the eager run did. Kept with a TODO: a decorator
that skips the eager run (``always_skip_eager=True``, ``mode=["graph"]``).

``combine(mode=[...], serialize=[False, True])``: the other parameters become test
arguments, one test per combination, which is what absl's ``parameterized.product`` does
(TF's ``generate`` already required a ``parameterized.TestCase``), so the decorator becomes
``@parameterized.product(serialize=[False, True])`` without the mode. TF's ``combine``
takes a value that is not a list as the one value of its parameter; so does the product's
``[value]``. A parameter given by a name (a list or not: unknown here) keeps a TODO.
"""

from __future__ import annotations

import libcst as cst

from tern.engine.rule import Rule
from tern.engine.results import code

EAGER_ALSO = ("run_all_keras_modes", "run_v2_only", "run_in_graph_and_eager_modes")
GENERATE = "generate"
#: where Keras 2 / tf_keras and TF keep these decorators (canonical spellings: tf_keras is keras)
HOMES = (
    "keras.keras_parameterized", "keras.testing_utils", "keras.testing_infra.test_combinations",
    "keras.testing_infra.test_utils", "keras.src.testing_infra.test_combinations", "keras.src.testing_infra.test_utils",
    "tensorflow.python.framework.test_util", "tensorflow.python.framework.combinations",
    "tensorflow.__internal__.test.combinations",
)
KNOWN = frozenset(f"{home}.{name}" for home in HOMES for name in (*EAGER_ALSO, GENERATE, "combine"))


def _canonical(ctx, node: cst.BaseExpression) -> str | None:
    name = ctx.resolve(node)
    return name if name in KNOWN else None


def _verdict(ctx, dec: cst.Decorator) -> tuple | None:
    """(construct, None) to drop the decorator, (construct, None, replacement) to replace it,
    (construct, reason) to keep it with a TODO, None: not ours."""
    expr = dec.decorator
    call = expr if isinstance(expr, cst.Call) else None
    name = _canonical(ctx, call.func if call else expr)
    if name is None:
        return None
    short = ".".join(name.split(".")[-2:])  # test_combinations.run_all_keras_modes
    if name.rsplit(".", 1)[-1] in EAGER_ALSO:
        for arg in call.args if call else ():
            key = arg.keyword.value if arg.keyword else None
            if key == "always_skip_eager" and not (isinstance(arg.value, cst.Name) and arg.value.value == "False"):
                return short, "the test skips the eager run (always_skip_eager): it only runs in graph mode, which JAX has not"
            if key not in ("config", "always_skip_v1", "always_skip_eager", "func"):
                return short, f"argument `{key or 'positional'}` is not one tern knows to be mode-only"
        return short, None
    if name.rsplit(".", 1)[-1] == GENERATE and call is not None and len(call.args) == 1 and call.args[0].keyword is None:
        combine = call.args[0].value
        if not (isinstance(combine, cst.Call) and (_canonical(ctx, combine.func) or "").endswith(".combine")):
            return short, "only generate(combine(mode=[...])) is translated"
        keys = [a.keyword.value if a.keyword else None for a in combine.args]
        if None in keys:
            return short, "a combination parameter is not given by keyword"
        mode = next((a.value for a in combine.args if a.keyword.value == "mode"), None)
        values = [e.value.evaluated_value for e in mode.elements if isinstance(e.value, cst.SimpleString)] \
            if isinstance(mode, (cst.List, cst.Tuple)) else None
        if mode is not None and (values is None or len(values) != len(mode.elements)):
            return short, "the modes are not a literal list of strings"
        if mode is not None and "eager" not in values:
            return short, f"modes {values} do not include the eager run: graph-mode tests have no JAX counterpart"
        others = [a for a in combine.args if a.keyword.value != "mode"]
        if not others:
            return short, None
        grid = []
        for arg in others:
            if isinstance(arg.value, cst.List):
                grid.append(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT))
            elif _is_literal(arg.value):
                grid.append(arg.with_changes(value=cst.List([cst.Element(arg.value)]), comma=cst.MaybeSentinel.DEFAULT))
            else:
                return short, (f"combination parameter `{arg.keyword.value}` is given by a name: TF takes a list as its "
                               "values and anything else as one value; write it with absl's parameterized.product")
        grid = [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for a in grid[:-1]] + grid[-1:]
        product = cst.Call(func=ctx.target_name("absl.testing.parameterized.product"), args=grid)
        return short, None, dec.with_changes(decorator=product)
    return None


def _is_literal(node: cst.BaseExpression) -> bool:
    try:
        __import__("ast").literal_eval(code(node))
    except (ValueError, SyntaxError, TypeError):
        return False
    return True


def _without_mode_decorators(ctx, node):
    decorators, changed = [], False
    for dec in node.decorators:
        verdict = _verdict(ctx, dec)
        if verdict is None:
            decorators.append(dec)
            continue
        construct, reason, *replacement = verdict
        if reason is None:
            changed = True
            decorators.extend(replacement)
            continue
        ctx.todo(construct, reason)
        decorators.append(dec)
    return node.with_changes(decorators=decorators) if changed else None


class KerasModesRule(Rule):
    id = "testing:keras-modes"
    consumes = KNOWN  # a kept decorator carries this rule's TODO, not a second "no rule" one
    scope = "tests"
    order = 6

    def leave_function(self, ctx, original, updated):
        return _without_mode_decorators(ctx, updated)

    def leave_class(self, ctx, original, updated):
        return _without_mode_decorators(ctx, updated)


RULE = KerasModesRule()
