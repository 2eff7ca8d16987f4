"""Keras' shared layer-test harness, ``layer_test(layer_cls, kwargs=..., input_shape=...)``, to
``keras_layer_test`` (``support/keras_layer_test.py``: what it checks, and what it does not).

Keras' own copies (``keras.testing_utils``, ``keras.testing_infra.test_utils``, tf_keras')
are recognised by name; layer libraries carry a copy of it (``testing_utils.py`` beside
their tests), recognised as a call of ``layer_test`` or ``<module>.layer_test`` where the
module is named ``testing_utils``/``test_utils`` and not TF's or Keras', bound to Keras'
signature (an argument Keras' harness does not take leaves the call with a TODO, so a
changed copy is not silently read as Keras'). Translated only for a layer class the package
defines (a Flax module taking the same keyword arguments): a Keras table layer's kwargs are
Keras' names, not its Flax module's. Kept with a TODO: ``adapt_data`` and ``supports_masking``
(no Flax counterpart), a 64-bit literal dtype.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.results import Refusal
from tern.engine.render import bind
from tern.engine.rule import Rule

PARAMS = ["layer_cls", "kwargs", "input_shape", "input_dtype", "input_data", "expected_output",
          "expected_output_dtype", "expected_output_shape", "validate_training", "adapt_data",
          "custom_objects", "test_harness", "supports_masking"]
UNSUPPORTED = {
    "adapt_data": "adapt() is a Keras preprocessing layer's, with no Flax counterpart",
    "supports_masking": "Keras' implicit masks have no Flax counterpart (masks are explicit arguments)",
}
HOMES = ("keras.testing_utils", "keras.testing_infra.test_utils", "keras.src.testing_infra.test_utils")
LOCAL_MODULES = ("testing_utils", "test_utils")
WIDE = {"float64", "int64", "uint64", "complex128"}


def _is_harness(ctx, func: cst.BaseExpression) -> bool:
    if not ctx.mentions("layer_test"):
        return False  # nothing in the file is so called or resolves to it
    name = ctx.resolve(func)
    if name is not None:
        return name in {f"{home}.layer_test" for home in HOMES}
    if m.matches(func, m.Name("layer_test")):
        return True
    return m.matches(func, m.Attribute(value=m.Name(), attr=m.Name("layer_test"))) and \
        func.value.value in LOCAL_MODULES and ctx.resolve(func.value) is None


class LayerTestRule(Rule):
    id = "testing:layer-test"
    consumes = frozenset(f"{home}.layer_test" for home in HOMES)  # kept: this rule's TODO, not a "no rule" one
    scope = "tests"
    order = 65

    def leave_call(self, ctx, original, updated):
        if not _is_harness(ctx, original.func):
            return None
        construct = "layer_test"
        bound = bind(updated, tuple(PARAMS))
        if isinstance(bound, Refusal):
            ctx.todo(construct, f"not Keras' layer_test signature: {bound.reason}")
            return None
        for name, reason in UNSUPPORTED.items():
            if name in bound.args:
                ctx.todo(construct, f"{name}: {reason}")
                return None
        for arg in updated.args:
            if isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value in WIDE:
                ctx.todo(construct, f"dtype {arg.value.evaluated_value}: JAX is 32-bit unless jax_enable_x64 is on")
                return None
        cls = bound.args.get("layer_cls")
        if not (isinstance(cls, cst.Name) and ctx.package.is_module_class(cls.value)):
            ctx.todo(construct, "only a layer class this package defines is translated (a Keras layer's kwargs "
                     "are Keras' names, not its Flax module's)")
            return None
        return updated.with_changes(func=cst.Name("keras_layer_test"))


RULE = LayerTestRule()
