"""A Keras ``train_step`` / ``test_step`` override becomes a pure step plus its tracker updates.

::

    def train_step(self, data):                    def train_step(self, state, data):
        with tf.GradientTape() as tape:                def compute_loss(params):
            loss, kl = self.losses_of(data)                def forward(self):
        grads = tape.gradient(                                 loss, kl = self.losses_of(data)
            loss, self.trainable_weights)                      return loss, kl
        self.optimizer.apply_gradients(                    (loss, kl), model_state = state.apply_model(params, method=forward)
            zip(grads, self.trainable_weights))            return loss, (model_state, kl)
        self.loss_tracker.update_state(loss)           (loss, (model_state, kl)), grads = jax.value_and_grad(
        self.kl_tracker.update_state(kl)                   compute_loss, has_aux=True)(state.params)
        return {m.name: m.result()                     state = state.apply_gradients(grads=grads, model_state=model_state)
                for m in self.metrics}                 return state, {"kl": kl, "loss": loss}

                                                   def train_step_logs(self, kl, loss):
                                                       self.loss_tracker.update_state(loss)
                                                       self.kl_tracker.update_state(kl)
                                                       return {m.name: m.result() for m in self.metrics}

The tape body runs inside the module, bound to the step's params (``forward``: ``self``
there is the bound module, so ``self(...)``, methods and sublayers work as in Keras, and
sampling layers draw from the state's key); ``test_step`` runs its statements before the
trackers the same way, with the state's params, and returns only the values. The part
from the first tracker use on stays Python: ``KerasTrainer`` jits ``train_step`` /
``test_step`` and hands their values to ``train_step_logs`` / ``test_step_logs`` on the
module object, whose trackers persist (``keras_tracker``; ``keras_class.py`` turns them
into properties). Which overrides qualify, and the reason for the others, is
``tern/features/training/step_overrides.py``'s.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.engine.rule import Rule
from tern.engine.walk import findall
from tern.engine.results import code
from tern.features.training import TrainingFacts

TAG = "step_override"
REFUSED = "step_override_refused"
LOGS_COMMENT = ("# tern: the rest of Keras' {name}, outside jit: KerasTrainer runs it on the values the jitted "
                "`{name}` returns (metric trackers are Python objects)")


def _tuple(names: list[str]) -> str:
    return names[0] if len(names) == 1 else "(" + ", ".join(names) + ")"


def _values(names) -> str:
    return "{" + ", ".join(f'"{n}": {n}' for n in names) + "}"


def _is_doc(stmt: cst.BaseStatement) -> bool:
    return m.matches(stmt, m.SimpleStatementLine(body=[m.Expr(value=m.SimpleString() | m.ConcatenatedString())]))


def _touches(stmt: cst.CSTNode, attrs: set[str]) -> bool:
    return any(a.attr.value in attrs for a in findall(stmt, m.Attribute(value=m.Name("self"), attr=m.Name())))


def _parse(text: str) -> cst.BaseStatement:
    return cst.parse_statement(text)


def _block(stmts) -> cst.IndentedBlock:
    return cst.IndentedBlock(list(stmts))


class KerasStepOverrideRule(Rule):
    id = "structure:keras-step-override"
    scope = "models"
    order = 99  # last: it turns one method into two (a FlattenSentinel no later rule could take)

    @staticmethod
    def _plan(ctx, name: str):
        info = ctx.keras_class
        if info is None or info.refusal or len(ctx.frames) != info.frame_depth + 1:
            return None
        steps = ctx.package.fact(TrainingFacts).models.steps.get(info.name)
        return steps.plans.get(name) if steps is not None else None

    @staticmethod
    def _refusal(ctx, name: str) -> str | None:
        info = ctx.keras_class
        if info is None or info.refusal or len(ctx.frames) != info.frame_depth + 1:
            return None
        steps = ctx.package.fact(TrainingFacts).models.steps.get(info.name)
        return steps.refusals.get(name) if steps is not None else None

    def visit_function(self, ctx, node):
        if self._plan(ctx, node.name.value) is not None:
            ctx.frame.tags.add(TAG)
        elif self._refusal(ctx, node.name.value) is not None:
            ctx.frame.tags.add(REFUSED)

    def leave_function(self, ctx, original, updated):
        if REFUSED in ctx.frame.tags:
            ctx.todo(f"{ctx.keras_class.name}.{original.name.value}",
                     f"Keras step override not translated: {self._refusal(ctx, original.name.value)}")
            return None
        if TAG not in ctx.frame.tags:
            return None
        plan = self._plan(ctx, original.name.value)
        stmts = list(updated.body.body)
        doc = stmts[:1] if stmts and _is_doc(stmts[0]) else []
        body = stmts[len(doc):]
        trackers = {*ctx.keras_class.trackers, "metrics"}
        if plan.method == "train_step":
            pure, eager = self._train(ctx, body, plan, trackers)
        else:
            pure, eager = self._test(body, plan, trackers)
        params = updated.params.with_changes(params=[
            cst.Param(cst.Name("self"), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            cst.Param(cst.Name("state"), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            cst.Param(cst.Name(plan.data)),
        ])
        step = updated.with_changes(params=params, body=updated.body.with_changes(body=[*doc, *pure]))
        logs_params = [cst.Param(cst.Name(n)) for n in ("self", *plan.values)]
        logs_params = [p.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                       if i < len(logs_params) - 1 else p for i, p in enumerate(logs_params)]
        comment = cst.EmptyLine(comment=cst.Comment(LOGS_COMMENT.format(name=plan.method)))
        logs = cst.FunctionDef(
            name=cst.Name(f"{plan.method}_logs"), params=cst.Parameters(logs_params), body=_block(eager),
            leading_lines=[cst.EmptyLine(indent=False), comment],
        )
        return cst.FlattenSentinel([step, logs])

    @staticmethod
    def _split(rest, trackers):
        at = next(i for i, s in enumerate(rest) if _touches(s, trackers) or i == len(rest) - 1)
        return rest[:at], rest[at:]

    def _train(self, ctx, body, plan, trackers):
        at = next(i for i, s in enumerate(body) if isinstance(s, cst.With)
                  and "GradientTape" in code(s.items[0].item))
        tape = body[at]
        before, rest = body[:at], body[at + 3:]
        middle, eager = self._split(rest, trackers)
        loss, aux = plan.loss, list(plan.aux)
        forward = cst.FunctionDef(
            name=cst.Name("forward"), params=cst.Parameters([cst.Param(cst.Name("self"))]),
            body=_block([*tape.body.body, _parse(f"return {', '.join([loss, *aux])}\n")]),
        )
        vag = ctx.plan.spell("jax") + ".value_and_grad"
        compute = cst.FunctionDef(
            name=cst.Name("compute_loss"), params=cst.Parameters([cst.Param(cst.Name("params"))]),
            body=_block([
                forward,
                _parse(f"{_tuple([loss, *aux])}, model_state = state.apply_model(params, method=forward)\n"),
                _parse(f"return {loss}, {_tuple(['model_state', *aux])}\n"),
            ]),
            leading_lines=tape.leading_lines,
        )
        pure = [
            *before,
            compute,
            _parse(f"({loss}, {_tuple(['model_state', *aux])}), {plan.grads} = {vag}(compute_loss, has_aux=True)(state.params)\n"),
            _parse(f"state = state.apply_gradients(grads={plan.grads}, model_state=model_state)\n"),
            *middle,
            _parse(f"return state, {_values(plan.values)}\n"),
        ]
        return pure, eager

    def _test(self, body, plan, trackers):
        before, eager = self._split(body, trackers)
        computed = [v for v in plan.values if v != plan.data]
        pure = []
        if before and computed:
            pure = [
                cst.FunctionDef(
                    name=cst.Name("forward"), params=cst.Parameters([cst.Param(cst.Name("self"))]),
                    body=_block([*before, _parse(f"return {', '.join(computed)}\n")]),
                ),
                _parse(f"{', '.join(computed)} = state.apply_model(state.params, method=forward)[0]\n"),
            ]
        return [*pure, _parse(f"return {_values(plan.values)}\n")], eager


RULE = KerasStepOverrideRule()
