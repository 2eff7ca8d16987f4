"""A ``tf.GradientTape`` training step becomes a pure step over a train state.

::

    @tf.function                                   @functools.partial(jax.jit, static_argnames=("loss_fn",))
    def train_step(model, optimizer, loss_fn, x, y):   def train_step(state, loss_fn, x, y):
        with tf.GradientTape() as tape:                    def compute_loss(params):
            logits = model(x, training=True)                   logits, model_state = state.apply_model(params, x, training=True)
            loss = loss_fn(y, logits)                          loss = loss_fn(y, logits)
        grads = tape.gradient(                                 return loss, model_state
            loss, model.trainable_variables)               (loss, model_state), grads = jax.value_and_grad(
        optimizer.apply_gradients(                             compute_loss, has_aux=True)(state.params)
            zip(grads, model.trainable_variables))         state = state.apply_gradients(grads=grads, model_state=model_state)
        return loss                                        return state, loss

The state (``rules/support/KerasTrainState.py``) holds params, optimizer state, step,
BatchNorm statistics and the dropout key; the optimizer lives in it, so its parameter
goes. Names the tape body assigns and the rest of the step reads come out of the loss
function as auxiliary values. Parameters the step calls (a loss function) are static
under ``jax.jit``, as are literal int/str/bool defaults (``tf_function.py``). Which
functions qualify is decided package-wide in ``tern/features/training/train_steps.py``, which also gives
the reason a tape is left as written; callers are rewritten by
``train_state_callers.py`` (package code) and ``testing/train_state_calls.py`` (tests).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.rule import Rule
from tern.engine.walk import findall
from tern.engine.transform import transform
from tern.engine.results import code
from tern_rules.structure.input_gradient_tape import Put, rewrite_input_tapes, stores
from tern.features.training import TrainingFacts

TAPE = "tensorflow.GradientTape"
GENERIC = "a tape outside a training step tern recognizes (see tern/features/training/train_steps.py); use jax.grad / jax.value_and_grad"
TEST_TAPE = ("a tape in a test, differentiating with respect to a model's variables: here they are arrays in this "
             "file's registry, not variables a tape watches; differentiate a function of them with jax.grad")


def _loads(nodes) -> set[str]:
    return {n.value for node in nodes for n in findall(node, m.Name())}


def _stmt(text: str) -> cst.BaseStatement:
    return cst.parse_statement(text)


def _names_tuple(names: list[str]) -> str:
    return names[0] if len(names) == 1 else "(" + ", ".join(names) + ")"


def step_decorator(ctx, original: cst.FunctionDef, updated: cst.FunctionDef, static: list[str]):
    """``updated``'s decorators with the jit that replaced ``@tf.function`` given ``static``."""
    decorators = list(updated.decorators)
    hits = [i for i, d in enumerate(original.decorators)
            if ctx.resolve(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) == "tensorflow.function"]
    if not hits or len(decorators) != len(original.decorators):
        return decorators
    i = hits[0]
    if "jit" not in code(decorators[i].decorator):
        return decorators  # left eager on purpose (Python control flow): see tf_function.py
    if static:
        names = ", ".join(f'"{n}"' for n in static) + ("," if len(static) == 1 else "")
        expr = ctx.target_expr(f"functools.partial(jax.jit, static_argnames=({names}))")
    else:
        expr = ctx.target_name("jax.jit")
    decorators[i] = decorators[i].with_changes(decorator=expr)
    return decorators


def static_params(params: cst.Parameters, body: cst.CSTNode) -> list[str]:
    """Parameters called in ``body`` (functions) or defaulting to int/str/bool literals."""
    called = {c.func.value for c in findall(body, m.Call(func=m.Name()))}
    out = []
    for p in (*params.params, *params.kwonly_params):
        literal = isinstance(p.default, (cst.Integer, cst.SimpleString)) or m.matches(p.default, m.Name("True") | m.Name("False"))
        if p.name.value in called or literal:
            out.append(p.name.value)
    return out


def replace_params(params: cst.Parameters, model: str, drop: str | None) -> cst.Parameters:
    """``model`` renamed ``state``, ``drop`` removed, commas kept tidy."""
    kept = [p.with_changes(name=cst.Name("state")) if p.name.value == model else p
            for p in params.params if p.name.value != drop]
    if kept:
        kept[-1] = kept[-1].with_changes(comma=params.params[-1].comma if params.params[-1].name.value != drop
                                         else cst.MaybeSentinel.DEFAULT)
    return params.with_changes(params=kept)


def state_and(value: cst.BaseExpression | None) -> cst.Tuple:
    """``state, value``; a tuple value keeps its own parentheses (``state, (a, b)``)."""
    if value is None:
        value = cst.Name("None")
    elif isinstance(value, cst.Tuple) and not value.lpar:
        value = value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Tuple([cst.Element(cst.Name("state")), cst.Element(value)], lpar=[], rpar=[])


def returning_state(body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """Top-level ``return X`` -> ``return state, X``; a body that falls off the end returns ``state, None``."""
    out = []
    for stmt in body:
        if m.matches(stmt, m.SimpleStatementLine(body=[m.Return()])):
            ret = stmt.body[0].with_changes(value=state_and(stmt.body[0].value),
                                            whitespace_after_return=cst.SimpleWhitespace(" "))
            stmt = stmt.with_changes(body=[ret])
        out.append(stmt)
    if not out or not m.matches(out[-1], m.SimpleStatementLine(body=[m.Return()])):
        out.append(_stmt("return state, None\n"))
    return out


class GradientTapeStepRule(Rule):
    id = "structure:gradient-tape-step"
    consumes = frozenset({TAPE})
    scope = "all"  # tests: input tapes are rewritten, others keep a TODO
    order = 45  # after tf_function.py has chosen between jax.jit and eager

    def visit_function(self, ctx, node):
        sig = ctx.package.fact(TrainingFacts).steps.get(node.name.value)
        if sig is not None and sig.kind == "step" and not sig.pairs and len(ctx.frames) == 1 and not ctx.is_test \
                and not ctx.frame.in_module_method:  # several pairs: multi_state_step.py
            ctx.frame.tags.add("train_step")

    def leave_call(self, ctx, original, updated):
        if ctx.resolve(original.func) == TAPE:
            frame = ctx.frames[0] if ctx.frames else None
            if frame is None:
                ctx.todo("tf.GradientTape", GENERIC)
            elif not frame.tags & {"train_step", "multi_step", "step_override"}:  # keras_step_override.py, multi_state_step.py
                frame.tags.add("untranslated_tape")
        return None

    def leave_function(self, ctx, original, updated):
        if "untranslated_tape" in ctx.frame.tags and len(ctx.frames) == 1:
            rewritten, reasons = rewrite_input_tapes(ctx, updated)
            if not reasons:
                return rewritten
            generic = TEST_TAPE if ctx.is_test else GENERIC
            refusal = None if ctx.is_test else ctx.package.fact(TrainingFacts).refusals.get(ctx.frame.name)
            ctx.todo("tf.GradientTape", refusal or next((r for r in reasons if r), generic))
            return None
        if "train_step" not in ctx.frame.tags:
            return None
        sig = ctx.package.fact(TrainingFacts).steps[original.name.value]
        body = list(updated.body.body)
        at = next(i for i, s in enumerate(body) if isinstance(s, cst.With) and "GradientTape" in code(s.items[0].item))
        tape = body[at]
        tape_name = tape.items[0].asname.name.value
        after = body[at + 1:]
        grad_i = next(i for i, s in enumerate(after) if findall(s, m.Call(func=m.Attribute(value=m.Name(tape_name), attr=m.Name("gradient")))))
        grad_call = findall(after[grad_i], m.Call())[0]
        loss = grad_call.args[0].value.value
        grads = after[grad_i].body[0].targets[0].target.value
        apply_i = next(i for i, s in enumerate(after) if findall(s, m.Attribute(attr=m.Name("apply_gradients"))))
        applied = findall(after[apply_i], m.Call(func=m.Name("zip")))[0].args[0].value.value

        inner = [new for s in tape.body.body for new in self._model_call(s, sig.model)]
        losses = m.Attribute(value=m.Name(sig.model), attr=m.Name("losses"))
        if any(findall(s, losses) for s in inner):
            # Keras' model.losses after the forward pass: the terms it sowed (rules/support/keras_model_losses.py)
            terms = cst.parse_expression("keras_model_losses(model_state)")
            inner = [m.replace(s, losses, terms) for s in inner]
        used_after = _loads(after)
        aux = sorted((stores(tape.body) & used_after) - {loss})
        aux_names = ["model_state", *aux]
        ret = _stmt(f"return {loss}, {_names_tuple(aux_names)}\n")
        compute = cst.FunctionDef(
            name=cst.Name("compute_loss"),
            params=cst.Parameters([cst.Param(cst.Name("params"))]),
            body=cst.IndentedBlock([*inner, ret]),
            leading_lines=tape.leading_lines,
        )
        jax_vag = ctx.target_name("jax.value_and_grad")
        vag = _stmt(f"({loss}, {_names_tuple(aux_names)}), {grads} = VAG(compute_loss, has_aux=True)(state.params)\n")
        vag = transform(vag, Put("VAG", jax_vag))
        update = _stmt(f"state = state.apply_gradients(grads={applied}, model_state=model_state)\n").with_changes(
            leading_lines=after[apply_i].leading_lines)
        rest = [s for i, s in enumerate(after) if i not in (grad_i, apply_i)]
        rest.insert(apply_i - 1 if apply_i > grad_i else apply_i, update)
        new_body = [*body[:at], compute, vag, *returning_state(rest)]
        params = replace_params(updated.params, sig.model, sig.optimizer)
        out = updated.with_changes(params=params, body=updated.body.with_changes(body=new_body))
        return out.with_changes(decorators=step_decorator(ctx, original, out, static_params(params, out.body)))

    @staticmethod
    def _model_call(stmt: cst.BaseStatement, model: str) -> list[cst.BaseStatement]:
        """``y = model(...)`` -> ``y, model_state = state.apply_model(params, ...)``; a call nested
        in an expression is hoisted into ``<model>_outputs`` (tern/features/training/train_steps.py checked it may be)."""
        calls = findall(stmt, m.Call(func=m.Name(model)))
        if not calls or not isinstance(stmt, cst.SimpleStatementLine):
            return [stmt]
        call = calls[0]
        args = [cst.Arg(cst.Name("params"), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))), *call.args]
        value = cst.Call(func=cst.parse_expression("state.apply_model"), args=args)
        direct = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(target=m.Name())], value=m.Call(func=m.Name(model)))])
        if m.matches(stmt, direct):
            assign = stmt.body[0]
            targets = [cst.AssignTarget(cst.Tuple([cst.Element(assign.targets[0].target), cst.Element(cst.Name("model_state"))], lpar=[], rpar=[]))]
            return [stmt.with_changes(body=[assign.with_changes(targets=targets, value=value)])]
        name = f"{model}_outputs"
        hoisted = cst.SimpleStatementLine(
            [cst.Assign([cst.AssignTarget(cst.Tuple([cst.Element(cst.Name(name)), cst.Element(cst.Name("model_state"))], lpar=[], rpar=[]))], value)],
            leading_lines=stmt.leading_lines)
        return [hoisted, transform(stmt.with_changes(leading_lines=[]), Put(call, cst.Name(name)))]


RULE = GradientTapeStepRule()
