"""A BaseRandomLayer's draws, ``self._random_generator.random_uniform(...)``, through the API table.

Keras 2's ``keras.__internal__.layers.BaseRandomLayer`` gives its subclasses a seeded
``RandomGenerator`` as ``self._random_generator``. The engine translates names it resolves
through imports; this generator is an attribute, so this rule names its calls
(``keras.src.backend.RandomGenerator.<method>``, the class in tf_keras) and translates them
with that ``[[api]]`` record in ``rules/api/random.toml``: inside the translated module a
draw takes ``self.make_rng("dropout")``. A method the table does not have, a class that
stores its own ``_random_generator``, or a call outside the class's methods gets a TODO.
"""

from __future__ import annotations

import libcst as cst

from tern.engine.results import Refusal
from tern.engine.render import api_call
from tern.engine.rule import Rule
from tern_rules.structure.keras_class import RANDOM_LAYER, KerasClass

GENERATOR = "_random_generator"
SOURCE = "keras.src.backend.RandomGenerator"


class RandomGeneratorRule(Rule):
    id = "structure:random-generator"
    scope = "models"
    order = 40

    def leave_call(self, ctx, original, updated):
        func = original.func  # self._random_generator.<method>(...)? asked of every call: no matcher
        if func.__class__ is not cst.Attribute or func.value.__class__ is not cst.Attribute \
                or func.value.attr.value != GENERATOR or func.value.value.__class__ is not cst.Name \
                or func.value.value.value != "self":
            return None
        info = ctx.keras_class
        if not isinstance(info, KerasClass) or RANDOM_LAYER not in info.bases or info.refusal:
            return None  # not a BaseRandomLayer tern translates: the attribute is someone else's
        method = original.func.attr.value
        construct = f"self.{GENERATOR}.{method}"
        record = ctx.tables.api.get(f"{SOURCE}.{method}")
        if record is None:
            ctx.todo(construct, "a BaseRandomLayer generator method with no record in rules/api/random.toml")
            return None
        if ctx.frame is None or not ctx.frame.in_module_method:
            ctx.todo(construct, "a draw outside the layer's methods has no module RNG stream: pass a PRNG key")
            return None
        out = api_call(ctx, record, updated)
        if isinstance(out, Refusal):
            ctx.todo(construct, out.reason)
            return None
        return out


RULE = RandomGeneratorRule()
