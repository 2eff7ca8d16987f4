"""``x.__class__.from_config(x.get_config())`` -> ``keras_config_copy(x)``.

Keras objects copy themselves through their config; what a translation holds in their place
(JAX initializers and activations, tern's regularizers, Flax modules) mostly has no config,
so the expression would fail when it runs. The copy is made by rules/support/keras_config_copy.py,
which picks the right notion of copy at run time (the value itself, ``module.clone()``, or
Keras' protocol for any other object). The initializer and regularizer converters see through
package functions that only do this (``PackageInfo.config_copies``).
"""

from __future__ import annotations

import ast

import libcst as cst

from tern.engine.package import config_copy_of
from tern.engine.rule import Rule
from tern.engine.results import code


class KerasConfigCopyRule(Rule):
    id = "structure:keras-config-copy"
    scope = "all"

    def leave_call(self, ctx, original, updated):
        if not (isinstance(original.func, cst.Attribute) and original.func.attr.value == "from_config"):
            return None
        try:
            parsed = ast.parse(code(original), mode="eval").body
        except SyntaxError:
            return None
        if config_copy_of(parsed) is None:
            return None
        copied = updated.func.value.value  # x of x.__class__
        return cst.Call(func=cst.Name("keras_config_copy"), args=[cst.Arg(copied)])


RULE = KerasConfigCopyRule()
