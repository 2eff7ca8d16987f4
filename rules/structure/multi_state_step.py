"""A step that trains several models, each with its own optimizer, takes one train state per model.

::

    @tf.function                                        @functools.partial(jax.jit, static_argnames=("n_critic",))
    def train_step(generator, critic, g_opt, c_opt,     def train_step(generator_state, critic_state, real, n_critic=5):
                   real, n_critic=5):                       for _ in range(n_critic):
        for _ in range(n_critic):                               def compute_c_loss(critic_params):
            with tf.GradientTape() as tape:                         critic = critic_state.replace(params=critic_params)
                fake = generator(noise(), training=True)            fake = generator_state.predict(noise(), training=True)
                c_loss = loss(critic(real), critic(fake))           c_loss = loss(critic.predict(real), critic.predict(fake))
            c_grads = tape.gradient(                                return c_loss
                c_loss, critic.trainable_variables)             c_loss, c_grads = jax.value_and_grad(compute_c_loss)(critic_state.params)
            c_opt.apply_gradients(                              critic_state = critic_state.apply_gradients(grads=c_grads)
                zip(c_grads, critic.trainable_variables))       ...
        ...                                                 return generator_state, critic_state, c_loss
        return c_loss

Which functions qualify, and why others do not, is decided in ``tern/features/training/multi_state_steps.py``.
In a loss function the differentiated model is its state with the traced params, so
passing it on (a gradient penalty, a reader in ``train_state_callers.py``) differentiates
through that call too; other models are read from their states. A training-mode call
(``predict(..., training=True)``) draws dropout from the state's key and refuses models
with moving statistics (support/KerasTrainState.py), whose updates it would drop.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from tern.features.training.multi_state_steps import state_name
from tern.engine.rule import Rule
from tern.engine.walk import findall
from tern.engine.transform import transform
from tern.engine.results import code
from tern_rules.structure.gradient_tape_step import static_params, step_decorator
from tern_rules.structure.input_gradient_tape import is_tape_with, stores
from tern_rules.structure.train_state_callers import References
from tern.features.training import TrainingFacts


def _stmt(text: str) -> cst.BaseStatement:
    return cst.parse_statement(text)


class _Models(References):
    """Model names become their states (``keep``: the one bound to its traced params here);
    calling one is Keras' forward pass, ``X.predict(...)``."""

    def __init__(self, models: set[str], keep: str | None = None):
        super().__init__()
        self.models, self.keep = models, keep

    def visit_FunctionDef(self, node):
        return not node.name.value.startswith("compute_")  # a loss function made here binds its own

    def leave_Name(self, original, updated):
        if original.value in self.models and id(original) not in self.skip and original.value != self.keep:
            return cst.Name(state_name(original.value))
        return updated

    def leave_Call(self, original, updated):
        func = original.func
        if isinstance(func, cst.Name) and func.value in self.models:
            return updated.with_changes(func=cst.Attribute(updated.func, cst.Name("predict")))
        return updated


class MultiStateStepRule(Rule):
    id = "structure:multi-state-step"
    scope = "models"
    order = 45

    def visit_function(self, ctx, node):
        sig = ctx.package.fact(TrainingFacts).steps.get(node.name.value)
        if sig is not None and sig.kind == "step" and sig.pairs and len(ctx.frames) == 1 and not ctx.frame.in_module_method:
            ctx.frame.tags.add("multi_step")

    def leave_function(self, ctx, original, updated):
        if "multi_step" not in ctx.frame.tags or len(ctx.frames) != 1:
            return None
        sig = ctx.package.fact(TrainingFacts).steps[original.name.value]
        models = {model for model, _ in sig.pairs}
        fn = updated
        body = self._block(ctx, fn, list(fn.body.body), models)
        body = [transform(s, _Models(models)) for s in body]
        states = ", ".join(state_name(model) for model, _ in sig.pairs)
        out = []
        for stmt in body:
            if m.matches(stmt, m.SimpleStatementLine(body=[m.Return()])):
                value = stmt.body[0].value
                text = code(value) if value is not None else "None"
                if isinstance(value, cst.Tuple) and not value.lpar:
                    text = f"({text})"
                stmt = _stmt(f"return {states}, {text}\n").with_changes(leading_lines=stmt.leading_lines)
            out.append(stmt)
        if not out or not m.matches(out[-1], m.SimpleStatementLine(body=[m.Return()])):
            out.append(_stmt(f"return {states}, None\n"))
        optimizers = {o for _, o in sig.pairs}
        kept = []
        for p in fn.params.params:
            if p.name.value in optimizers:
                continue
            kept.append(p.with_changes(name=cst.Name(state_name(p.name.value))) if p.name.value in models else p)
        if kept:
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        params = fn.params.with_changes(params=kept)
        new = fn.with_changes(params=params, body=fn.body.with_changes(body=out))
        return new.with_changes(decorators=step_decorator(ctx, original, new, static_params(params, new.body)))

    def _block(self, ctx, fn, block: list, models: set[str]) -> list:
        """``block`` with its training tapes rewritten, recursing into loops and branches."""
        out: list = []
        i = 0
        while i < len(block):
            stmt = block[i]
            if is_tape_with(stmt):
                consumed, new = self._tape(ctx, fn, block, i, models)
                out.extend(new)
                i = consumed
                continue
            if isinstance(stmt, (cst.For, cst.While, cst.If)):
                stmt = stmt.with_changes(body=stmt.body.with_changes(body=self._block(ctx, fn, list(stmt.body.body), models)))
            out.append(stmt)
            i += 1
        return out

    def _tape(self, ctx, fn, block: list, at: int, models: set[str]) -> tuple[int, list]:
        """The tape at ``block[at]``, its gradient and its update, as a loss function and an update;
        returns the index after the update and the statements that replace ``block[at:index]``."""
        tape = block[at]
        tape_name = tape.items[0].asname.name.value
        gradient = m.Call(func=m.Attribute(value=m.Name(tape_name), attr=m.Name("gradient")))
        grad_at = next(j for j in range(at + 1, len(block)) if findall(block[j], gradient))
        call = findall(block[grad_at], gradient)[0]
        loss = call.args[0].value.value
        model = call.args[1].value.value.value
        grads = block[grad_at].body[0].targets[0].target.value
        apply = m.Call(func=m.Attribute(attr=m.Name("apply_gradients")), args=[m.Arg(value=m.Call(
            func=m.Name("zip"), args=[m.Arg(value=m.Name(grads)), m.Arg()]))])
        apply_at = next(j for j in range(grad_at + 1, len(block)) if findall(block[j], apply))
        state, params = state_name(model), f"{model}_params"
        inner = [transform(s, _Models(models, keep=model)) for s in tape.body.body]
        body_ids = {id(n) for s in tape.body.body for n in findall(s, m.Name())}
        elsewhere = {n.value for n in findall(fn.body, m.Name()) if id(n) not in body_ids}
        aux = sorted((stores(*tape.body.body) & elsewhere) - {loss})
        ret = f"return {loss}, ({', '.join(aux)},)\n" if aux else f"return {loss}\n"
        compute = cst.FunctionDef(
            name=cst.Name(f"compute_{loss}"),
            params=cst.Parameters([cst.Param(cst.Name(params))]),
            body=cst.IndentedBlock([_stmt(f"{model} = {state}.replace(params={params})\n"), *inner, _stmt(ret)]),
            leading_lines=tape.leading_lines)
        vag = code(ctx.target_name("jax.value_and_grad"))
        if aux:
            grad_line = f"({loss}, ({', '.join(aux)},)), {grads} = {vag}(compute_{loss}, has_aux=True)({state}.params)\n"
        else:
            grad_line = f"{loss}, {grads} = {vag}(compute_{loss})({state}.params)\n"
        update = _stmt(f"{state} = {state}.apply_gradients(grads={grads})\n").with_changes(
            leading_lines=block[apply_at].leading_lines)
        between = [s for j, s in enumerate(block[at + 1:apply_at], at + 1) if j != grad_at]
        return apply_at + 1, [compute, _stmt(grad_line), *between, update]


RULE = MultiStateStepRule()
