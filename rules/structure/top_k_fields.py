"""``tf.math.top_k(x, k).indices``: the field of TF's namedtuple read off ``lax.top_k``'s list.

TF's ``top_k`` returns a ``TopKV2(values, indices)`` namedtuple; ``jax.lax.top_k`` returns
a plain list of the same two arrays, with no ``.values``/``.indices``. Unpacking and ``[0]``
/``[1]`` work alike on both, so only a field read straight off the call is rewritten, to
its index. A field read off a name bound to the result cannot be told from any other
``.values`` (a dict's, a sparse tensor's) and is left to fail loudly.
"""

from __future__ import annotations

import libcst as cst

from tern.engine.rule import Rule

SOURCES = frozenset({"tensorflow.math.top_k", "tensorflow.nn.top_k"})
FIELDS = {"values": "0", "indices": "1"}


class TopKFieldsRule(Rule):
    id = "structure:top-k-fields"
    order = 60

    def leave_attribute(self, ctx, original, updated):
        index = FIELDS.get(original.attr.value)
        if index is None or not isinstance(original.value, cst.Call) or ctx.resolve(original.value.func) not in SOURCES:
            return None
        return cst.Subscript(updated.value, [cst.SubscriptElement(cst.Index(cst.Integer(index)))])


RULE = TopKFieldsRule()
