"""Tensor methods with no JAX array counterpart: ``x.numpy()`` and ``x.shape.as_list()``.

``np.asarray(x)`` is what ``.numpy()`` gives (a host NumPy array); ``list(x.shape)``
is ``as_list()`` for the static shapes JAX always has.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.rule import Rule


class TensorMethodsRule(Rule):
    id = "structure:tensor-methods"
    order = 60

    def leave_call(self, ctx, original, updated):
        if updated.args or not isinstance(updated.func, cst.Attribute):
            return None
        method = updated.func.attr.value
        receiver = updated.func.value
        if method == "numpy":
            return cst.Call(func=ctx.target_name("numpy.asarray"), args=[cst.Arg(receiver)])
        if method == "as_list" and m.matches(receiver, m.Attribute(attr=m.Name("shape"))):
            return cst.Call(func=cst.Name("list"), args=[cst.Arg(receiver)])
        return None


RULE = TensorMethodsRule()
