"""A ``tf.GradientTape`` in a test, over a model's variables, becomes ``jax.grad`` over the test's registry.

::

    with tf.GradientTape() as tape:                  def tape_target(tape_params):
        gp = penalty(critic, x)                          with _TernTapeParams(tape_params):
    grad = tape.gradient(gp, critic.layers[0].kernel)        gp = penalty(_tern_train_state(critic), x)
                                                         return jnp.sum(gp), (gp,)
                                                     (tape_grads, (gp,)) = jax.grad(tape_target, has_aux=True)(_tern_tape_params())
                                                     grad = _tern_tape_gradient(tape_grads, lambda: _tern_layers(critic)[0].kernel)

A Keras tape watches every trainable variable the body reads. In a translated test the
models' variables live in the file's registry (``module_calls.py``), so the body becomes
a function of every registered model's params, installed in the registry while it runs
(and the registry restored after: what the body writes there, e.g. moving statistics, is
dropped; a model first built inside the body is refused at run time, its variables did not
exist to differentiate). ``tape.gradient(target, sources)`` reads ``sources`` with the gradients in
place of the params, so any expression that reads a weight (``model.trainable_variables``,
a layer's ``kernel``) gives its gradient. TF differentiates the sum of a non-scalar target.
Differences kept visible: TF gives None for a variable the target does not depend on,
JAX zeros. Only the plain shape is rewritten (simple statements, one ``tape.gradient``
after the block, no ``watch``: an input tape is ``structure/input_gradient_tape.py``'s).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.rule import Rule
from tern.engine.walk import findall
from tern.engine.transform import transform
from tern.engine.results import code
from tern_rules.structure.input_gradient_tape import (PERSISTENT, Put, is_tape_with, names_in, tape_uses, plain_tape,
                                                       stores)


def _rewrite(ctx, fn, block: list, at: int) -> tuple[list, str | None]:
    stmt = block[at]
    tape = plain_tape(stmt)
    if tape is None:
        return block, PERSISTENT
    body = list(stmt.body.body)
    if not all(isinstance(s, cst.SimpleStatementLine) for s in body) or any(
            findall(s, m.Return() | m.Global() | m.Nonlocal()) or tape_uses(s, tape) for s in body):
        return block, None  # an input tape (watch) or a block: left to the caller's report
    gradient = m.Call(func=m.Attribute(value=m.Name(tape), attr=m.Name("gradient")))
    grads = [(i, c) for i, s in enumerate(block[at + 1:], at + 1) for c in findall(s, gradient)]
    if len(grads) != 1 or sum(len(tape_uses(s, tape)) for s in fn.body.body) != 1:
        return block, "the tape is used for more than one tape.gradient(...) after its block"
    grad_at, call = grads[0]
    if len(call.args) != 2 or any(a.keyword or a.star for a in call.args) or not isinstance(call.args[0].value, cst.Name):
        return block, "tape.gradient of something other than (target, sources)"
    target = call.args[0].value.value
    stored = stores(*body)
    if target not in stored:
        return block, f"the target `{target}` is not computed inside the tape"
    params = {p.name.value for p in (*fn.params.params, *fn.params.kwonly_params)}
    clash = sorted(stored & (stores(*block[:at]) | params))
    if clash:
        return block, f"`{clash[0]}` is rebound inside the tape; rename it there first"
    fn_target, fn_grads = f"{tape}_target", f"{tape}_grads"
    if {fn_target, fn_grads, f"{tape}_params"} & names_in(fn):
        return block, f"the test already uses `{fn_target}` or `{fn_grads}`, which the translation needs"
    later = set().union(*(names_in(s) for s in block[at + 1:]))
    aux = sorted((stored & later) - {target})
    bound = cst.With(items=[cst.WithItem(cst.Call(cst.Name("_TernTapeParams"), [cst.Arg(cst.Name(f"{tape}_params"))]))],
                     body=cst.IndentedBlock(body))
    total = code(ctx.target_name("jax.numpy.sum"))
    ret = f"return {total}({target}), ({', '.join(aux)},)\n" if aux else f"return {total}({target})\n"
    target_fn = cst.FunctionDef(name=cst.Name(fn_target), params=cst.Parameters([cst.Param(cst.Name(f"{tape}_params"))]),
                                body=cst.IndentedBlock([bound, cst.parse_statement(ret)]), leading_lines=stmt.leading_lines)
    grad = code(ctx.target_name("jax.grad"))
    lhs = f"({fn_grads}, ({', '.join(aux)},))" if aux else fn_grads
    options = ", has_aux=True" if aux else ""
    grad_stmt = cst.parse_statement(f"{lhs} = {grad}({fn_target}{options})(_tern_tape_params())\n")
    sources = cst.Lambda(cst.Parameters([]), call.args[1].value)
    value = cst.Call(cst.Name("_tern_tape_gradient"), [
        cst.Arg(cst.Name(fn_grads), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), cst.Arg(sources)])
    new = [*block[:at], target_fn, grad_stmt, *block[at + 1:grad_at], transform(block[grad_at], Put(call, value)),
           *block[grad_at + 1:]]
    return new, None


class TestTapesRule(Rule):
    id = "testing:test-tapes"
    scope = "tests"
    order = 44  # before structure/gradient_tape_step.py reports the tapes left

    def leave_function(self, ctx, original, updated):
        if len(ctx.frames) != 1:
            return None
        body, changed = _tapes_rewritten(ctx, updated, list(updated.body.body))
        if not changed:
            return None
        return updated.with_changes(body=updated.body.with_changes(body=body))


def _tapes_rewritten(ctx, function: cst.FunctionDef, block: list) -> tuple[list, bool]:
    """``block`` with its tapes (and those of the blocks inside it) rewritten; whether any was."""
    changed = False
    i = 0
    while i < len(block):
        stmt = block[i]
        if is_tape_with(stmt):
            new, _ = _rewrite(ctx, function, block, i)
            if new is not block:
                block, changed = new, True
                i += 2
                continue
        elif isinstance(stmt, (cst.For, cst.While, cst.If, cst.With)):
            inner, inner_changed = _tapes_rewritten(ctx, function, list(stmt.body.body))
            block[i] = stmt.with_changes(body=stmt.body.with_changes(body=inner))
            changed = changed or inner_changed
        i += 1
    return block, changed


RULE = TestTapesRule()
