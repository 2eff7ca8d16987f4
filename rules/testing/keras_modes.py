"""Keras' and TF's test-mode decorators, for a framework with one mode.

``@run_all_keras_modes`` (``keras_parameterized``, ``test_combinations``), ``@run_v2_only``,
``@run_in_graph_and_eager_modes`` and ``@combinations.generate(combinations.combine(mode=[...]))``
run a test once per TF execution mode (TF1 graph and session, eager, eager inside
tf.function). JAX has one mode, eager with jit where the code asks for it, so the
decorator is dropped when the eager run is among the modes and the decorator adds no test
parameter: the test then runs once, as the eager run did. Kept with a TODO: a decorator
that skips the eager run (``always_skip_eager=True``, ``mode=["graph"]``), and a
``combine(...)`` with other parameters (they become test arguments; absl's
``parameterized.product`` is the counterpart, not written here).
"""

from __future__ import annotations

import libcst as cst

from tern.rule import Rule

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


def _verdict(ctx, dec: cst.Decorator) -> tuple[str, str | None] | None:
    """(construct, None) to drop the decorator, (construct, reason) to keep it with a TODO, None: not ours."""
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
        if keys != ["mode"]:
            return short, ("combination parameters other than mode become test arguments: write them with "
                           "absl's parameterized.product")
        modes = combine.args[0].value
        values = [e.value.evaluated_value for e in modes.elements if isinstance(e.value, cst.SimpleString)] \
            if isinstance(modes, (cst.List, cst.Tuple)) else None
        if values is None or len(values) != len(modes.elements):
            return short, "the modes are not a literal list of strings"
        if "eager" not in values:
            return short, f"modes {values} do not include the eager run: graph-mode tests have no JAX counterpart"
        return short, None
    return None


def _without_mode_decorators(ctx, node):
    decorators, changed = [], False
    for dec in node.decorators:
        verdict = _verdict(ctx, dec)
        if verdict is None:
            decorators.append(dec)
            continue
        construct, reason = verdict
        if reason is None:
            changed = True
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
