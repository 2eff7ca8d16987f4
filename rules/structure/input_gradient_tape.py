"""A tape that differentiates with respect to watched tensors becomes ``jax.grad`` of a function of them.

::

    with tf.GradientTape() as gp_tape:                 def gp_tape_target(interpolated):
        gp_tape.watch(interpolated)                        scores = critic(interpolated, training=True)
        scores = critic(interpolated, training=True)       return jnp.sum(scores)
    grads = gp_tape.gradient(scores, [interpolated])   gp_tape_grads = jax.grad(gp_tape_target)(interpolated)
                                                       grads = [gp_tape_grads]

TF differentiates the sum of a non-scalar target (its output gradient is all ones), so
the function returns ``jnp.sum(target)``. Names the tape body assigns and the rest of the
function reads come out as auxiliary values. Inside a function that is itself
differentiated (a gradient penalty in a loss) this nests like TF's nested tapes:
``jax.grad`` of a function calling ``jax.grad``. Only the plain shape is rewritten: the
tape's body is ``watch`` calls on names, then simple statements; the tape is used once
more, by one ``tape.gradient(target, sources)`` after the block with a target the body
assigns and sources it watched. Anything else keeps the tape with a TODO.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m
from tern.engine.dispatch import CachedHooks
from tern.engine.walk import findall, walk
from tern.engine.transform import transform
from tern.engine.results import code


def is_tape_with(stmt: cst.CSTNode) -> bool:
    return (isinstance(stmt, cst.With) and len(stmt.items) == 1 and isinstance(stmt.items[0].item, cst.Call)
            and "GradientTape" in code(stmt.items[0].item.func))


def _watched(stmt: cst.BaseStatement, tape: str) -> list[str] | None:
    """The names ``tape.watch(x)`` / ``tape.watch([x, y])`` watches, or None if ``stmt`` is not that."""
    if not m.matches(stmt, m.SimpleStatementLine(body=[m.Expr(value=m.Call(
            func=m.Attribute(value=m.Name(tape), attr=m.Name("watch")), args=[m.Arg(keyword=None, star="")]))])):
        return None
    value = stmt.body[0].value.args[0].value
    if isinstance(value, cst.Name):
        return [value.value]
    if isinstance(value, (cst.List, cst.Tuple)) and all(isinstance(e.value, cst.Name) and isinstance(e, cst.Element)
                                                       for e in value.elements):
        return [e.value.value for e in value.elements]
    return None


def stores(*nodes: cst.CSTNode) -> set[str]:
    """Names bound by assignments and loop targets in ``nodes`` (not inside nested functions)."""
    found = _Stores()
    for node in nodes:
        walk(node, found)
    return found.out


class _Stores(cst.CSTVisitor):
    def __init__(self):
        self.out: set[str] = set()

    def visit_AssignTarget(self, n):
        self.out.update(x.value for x in findall(n, m.Name()))

    def visit_AugAssign(self, n):
        self.out.update(x.value for x in findall(n.target, m.Name()))

    def visit_AnnAssign(self, n):
        self.out.update(x.value for x in findall(n.target, m.Name()))

    def visit_For(self, n):
        self.out.update(x.value for x in findall(n.target, m.Name()))

    def visit_FunctionDef(self, n):
        return False


def names_in(node: cst.CSTNode) -> set[str]:
    return {n.value for n in findall(node, m.Name())}


def tape_uses(node: cst.CSTNode, tape: str) -> list[cst.Attribute]:
    return findall(node, m.Attribute(value=m.Name(tape)))


class Put(CachedHooks):
    """Replace a placeholder name (or one exact call node) by ``value``."""

    def __init__(self, target: str | cst.CSTNode, value: cst.BaseExpression):
        self.target, self.value = target, value

    def leave_Name(self, original, updated):
        return self.value if isinstance(self.target, str) and updated.value == self.target else updated

    def leave_Call(self, original, updated):
        return self.value if original is self.target else updated


PERSISTENT = "tf.GradientTape(persistent=..., watch_accessed_variables=...) or a tape not bound with `as`"


def plain_tape(stmt: cst.With) -> str | None:
    """The name of a ``with tf.GradientTape() as name:`` tape without arguments, else None."""
    item = stmt.items[0]
    if item.item.args or not (item.asname and isinstance(item.asname.name, cst.Name)):
        return None
    return item.asname.name.value


def _rewrite(ctx, fn: cst.FunctionDef, block: list, at: int, params: set[str]) -> tuple[list, str | None]:
    """``block`` with the tape at ``at`` rewritten, or the block as it was and the reason it is not."""
    stmt = block[at]
    tape = plain_tape(stmt)
    if tape is None:
        return block, PERSISTENT
    body = list(stmt.body.body)
    watched: list[str] = []
    while body and _watched(body[0], tape) is not None:
        watched += _watched(body.pop(0), tape)
    if not watched:
        return block, None  # not an input tape: the caller reports it
    if not body or not all(isinstance(s, cst.SimpleStatementLine) for s in body) or any(
            findall(s, m.Return() | m.Global() | m.Nonlocal()) or tape_uses(s, tape) for s in body):
        return block, ("the tape's body is more than simple statements after tape.watch (a block, return or other "
                       "tape call): differentiate a function of the watched tensors with jax.grad")
    grads = [(i, c) for i, s in enumerate(block[at + 1:], at + 1)
             for c in findall(s, m.Call(func=m.Attribute(value=m.Name(tape), attr=m.Name("gradient"))))]
    uses = [u for s in block[at + 1:] for u in tape_uses(s, tape)]
    if len(grads) != 1 or len(uses) != 1 or sum(len(tape_uses(s, tape)) for s in fn.body.body) != \
            sum(len(tape_uses(s, tape)) for s in block):
        return block, "the tape is used for more than one tape.gradient(...) after its block"
    grad_at, call = grads[0]
    args = call.args
    if len(args) != 2 or any(a.keyword or a.star for a in args) or not isinstance(args[0].value, cst.Name):
        return block, "tape.gradient of something other than (target, sources), or unconnected_gradients/output_gradients"
    target, sources = args[0].value.value, args[1].value
    stored = stores(*body)
    if target not in stored:
        return block, f"the target `{target}` is not computed inside the tape"
    if isinstance(sources, cst.Name):
        source_names, as_list = [sources.value], False
    elif isinstance(sources, cst.List) and sources.elements and all(
            isinstance(e, cst.Element) and isinstance(e.value, cst.Name) for e in sources.elements):
        source_names, as_list = [e.value.value for e in sources.elements], True
    else:
        return block, "tape.gradient with respect to something other than watched names"
    if not set(source_names) <= set(watched) or len(set(source_names)) != len(source_names):
        return block, "tape.gradient with respect to a tensor the tape does not watch (a variable): not translated"
    before = stores(*block[:at]) | params
    clash = sorted(stored & (before | set(watched)))
    if clash:
        return block, f"`{clash[0]}` is rebound inside the tape; rename it there first"
    fn_target, fn_grads = f"{tape}_target", f"{tape}_grads"
    if {fn_target, fn_grads} & names_in(fn):
        return block, f"the function already uses `{fn_target}` or `{fn_grads}`, which the translation needs"
    later = set().union(*(names_in(s) for s in block[at + 1:])) if at + 1 < len(block) else set()
    aux = sorted((stored & (later | _outside_names(fn, block))) - {target})
    total = cst.Call(ctx.target_name("jax.numpy.sum"), [cst.Arg(cst.Name(target))])
    ret = f"return __total__, ({', '.join(aux)},)\n" if aux else "return __total__\n"
    ret_stmt = transform(cst.parse_statement(ret), Put("__total__", total))
    target_fn = cst.FunctionDef(
        name=cst.Name(fn_target),
        params=cst.Parameters([cst.Param(cst.Name(n)) for n in watched]),
        body=cst.IndentedBlock([*body, ret_stmt]),
        leading_lines=stmt.leading_lines)
    argnums = [watched.index(n) for n in source_names]
    options = []
    if argnums != [0] or len(source_names) > 1:
        options.append(f"argnums={argnums[0]}" if len(argnums) == 1 else f"argnums=({', '.join(map(str, argnums))})")
    if aux:
        options.append("has_aux=True")
    lhs = f"({fn_grads}, ({', '.join(aux)},))" if aux else fn_grads
    grad_stmt = transform(cst.parse_statement(
        f"{lhs} = __grad__({', '.join([fn_target, *options])})({', '.join(watched)})\n"), Put("__grad__", ctx.target_name("jax.grad")))
    if len(source_names) == 1:
        value = cst.parse_expression(f"[{fn_grads}]" if as_list else fn_grads)
    else:
        value = cst.parse_expression(f"list({fn_grads})")
    new_block = [*block[:at], target_fn, grad_stmt, *block[at + 1:grad_at], transform(block[grad_at], Put(call, value)),
                 *block[grad_at + 1:]]
    return new_block, None


def _outside_names(fn: cst.FunctionDef, block: list) -> set[str]:
    """Names read in ``fn`` outside ``block`` (a tape in a loop: the names the rest of the function reads)."""
    inside = {id(n) for s in block for n in findall(s, m.Name())}
    return {n.value for n in findall(fn.body, m.Name()) if id(n) not in inside}


def rewrite_input_tapes(ctx, fn: cst.FunctionDef) -> tuple[cst.FunctionDef, list[str]]:
    """``fn`` with every input tape of its own body rewritten; the reasons for the tapes left."""
    params = {p.name.value for p in (*fn.params.params, *fn.params.kwonly_params, *fn.params.posonly_params)}
    reasons: list[str] = []

    def walk(block: list) -> list:
        i = 0
        while i < len(block):
            stmt = block[i]
            if is_tape_with(stmt):
                new, why = _rewrite(ctx, fn, block, i, params)
                if new is not block:
                    block = new
                    i += 2
                    continue
                reasons.append(why or "")
            elif isinstance(stmt, (cst.For, cst.While, cst.If, cst.With)) and not is_tape_with(stmt):
                block[i] = stmt.with_changes(body=stmt.body.with_changes(body=walk(list(stmt.body.body))))
            i += 1
        return block

    body = walk(list(fn.body.body))
    return fn.with_changes(body=fn.body.with_changes(body=body)), reasons
