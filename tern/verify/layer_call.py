"""A recorded layer call made again on the translated Flax module, as a jittable function of
its float inputs: what the replay (``replay.py``) and the search beyond the tests' inputs
(``search_replay.py``) share.

The module is built the way the original was (same class or factory, same arguments), its
variable tree learnt by abstract evaluation (no compilation), filled with the Keras weights
(``graft.py``); ``step(dtype)`` is one jitted function giving outputs and the gradients of
``sum(outputs * cotangents)`` with respect to parameters and float inputs, the cotangents
an argument so the replay's and the search's calls share one compilation.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tern.verify.arrays import build, unpack
from tern.verify.graft import graft


@dataclass
class LayerCall:
    module: Any
    kwargs: dict  # the recorded keywords the Flax ``__call__`` takes
    rngs: dict
    floats: list  # the float inputs, in the recording's ``float_inputs`` order
    rest: list  # the other array inputs (ids, masks)
    call_inputs: Callable[[list, list], Any]  # (floats, rest) -> (args, kwargs)

    def init(self, floats: list, rest: list) -> Any:
        call_args, call_kwargs = self.call_inputs(floats, rest)
        return self.module.init(self.rngs, *call_args, **call_kwargs)

    def abstract(self) -> Any:
        """The variable tree's shapes; raises where the call cannot be traced (data-dependent
        shapes): the replay then runs it eagerly."""
        import jax

        return jax.eval_shape(self.init, self.floats, self.rest)

    def step(self, dtype: Any, variables: dict, injector: Any = None, compiler_options: dict | None = None) -> Callable:
        """``(variables, floats, rest, cotangents) -> ((loss, (outputs, updates)), (grad params,
        grad floats))``, jitted (with XLA's ``compiler_options``); a training call returns the
        collections it updated."""
        import jax
        import jax.numpy as jnp

        module, rngs, call_inputs = self.module, self.rngs, self.call_inputs
        mutable = [c for c in variables if c != "params"] if self.kwargs.get("training") else False

        def loss_and_outputs(variables, floats, rest, cots):
            params, others = variables.get("params", {}), {c: t for c, t in variables.items() if c != "params"}

            def apply(params, floats):
                call_args, call_kwargs = call_inputs(floats, rest)
                with injector.injected() if injector else contextlib.nullcontext():
                    out = module.apply({**others, "params": params}, *call_args, rngs=rngs, mutable=mutable,
                                       **call_kwargs)
                out, updates = out if mutable else (out, {})
                outs = jax.tree_util.tree_leaves(out)
                loss = sum((jnp.sum(o.astype(dtype) * c.astype(dtype)) for o, c in zip(outs, cots) if c is not None),
                           jnp.zeros((), dtype))
                return loss, (out, updates)

            return jax.value_and_grad(apply, argnums=(0, 1), has_aux=True)(params, floats)
        return jax.jit(loss_and_outputs, compiler_options=compiler_options)


    def sample_runs(self, variables: dict, runs: int, seed: int) -> list:
        """The call's output leaves over ``runs`` fresh draws, ``(runs, *shape)`` each: RNG
        stream ``i`` of run ``r`` is ``fold_in(key(seed + i), r)``. The runs are vmapped under
        one jit; a translation that cannot be vmapped runs once per key, jitted."""
        import jax
        import jax.numpy as jnp

        module, call_inputs, floats, rest = self.module, self.call_inputs, self.floats, self.rest
        mutable = [c for c in variables if c != "params"] if self.kwargs.get("training") else False
        streams = sorted(self.rngs)

        def once(index):
            rngs = {name: jax.random.fold_in(jax.random.key(seed + i), index) for i, name in enumerate(streams)}
            call_args, call_kwargs = call_inputs(floats, rest)
            out = module.apply(variables, *call_args, rngs=rngs, mutable=mutable, **call_kwargs)
            return jax.tree_util.tree_leaves(out[0] if mutable else out)

        try:
            return [np.asarray(leaf) for leaf in jax.jit(jax.vmap(once))(jnp.arange(runs))]
        except Exception:  # noqa: BLE001 - Python control flow on values, a primitive without a batching rule
            single = jax.jit(once)
            per_run = [[np.asarray(leaf) for leaf in single(index)] for index in range(runs)]
            return [np.stack(leaves) for leaves in zip(*per_run)]


def layer_call(meta: dict, arrays: Any, accepted_kwargs: Callable[[Any, dict], dict]) -> LayerCall:
    """The translated module of a recorded case, built, with the recorded inputs split into
    float inputs and the rest (``accepted_kwargs``: the recorded keywords its ``__call__``
    takes, or raises)."""
    import jax
    import jax.numpy as jnp

    module = build(meta["origin"], arrays)
    args, kwargs = unpack(meta["inputs"], arrays, jnp.asarray)
    kwargs = accepted_kwargs(module, kwargs)
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1), "noise": jax.random.key(2)}
    leaves, treedef = jax.tree_util.tree_flatten([list(args), kwargs])
    float_at = list(meta["float_inputs"])
    rest_at = [i for i in range(len(leaves)) if i not in float_at and hasattr(leaves[i], "shape")]

    def call_inputs(floats, rest):
        merged = list(leaves)
        for position, value in [*zip(float_at, floats), *zip(rest_at, rest)]:
            merged[position] = value
        return jax.tree_util.tree_unflatten(treedef, merged)

    return LayerCall(module, kwargs, rngs, [leaves[i] for i in float_at], [leaves[i] for i in rest_at], call_inputs)


def ported_variables(abstract: Any, meta: dict, arrays: Any) -> tuple[dict, dict, list[str]]:
    """``(zero tree, the tree with the Keras weights grafted in, problems)``."""
    import jax

    init = jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), dict(abstract))
    units = [{**u, "tree": unpack(u["tree"], arrays)} for u in meta["units"]]
    variables, problems = graft(init, units)
    return init, variables, problems
