"""Random draws recorded on the TF side and injected into the translation, so a call that
samples (a VAE's ``z``, dropout in training, noise) is compared exactly, like any other.

TF side (``DrawTape``): while a recorded call runs, TF's raw sampling ops are wrapped, the
ones every ``tf.random``/``keras.random`` sampler ends in (stateful and stateless): each
draw of a standard normal or of a uniform in ``[0, 1)`` is kept in call order, before TF
scales and shifts it, and each ``tf.random.shuffle`` as the order it gave the rows. Replaying those draws to TF itself must reproduce the call's outputs
exactly; only then is the case recorded with its draws.

JAX side (``injected``): while the translation is traced, ``jax.random.normal``,
``uniform``, ``bernoulli`` and ``permutation`` return the recorded draws in the same order
instead of sampling: a normal as drawn, a uniform scaled to ``[minval, maxval)``, a
Bernoulli(p) mask from a uniform ``u``, rows in the order ``tf.random.shuffle`` put them. Two conventions meet there: TF's dropout keeps ``u >= rate`` (Flax's
``nn.Dropout`` asks for a Bernoulli of ``keep_prob = 1 - rate``: the same mask is
``u >= 1 - p``), while a Bernoulli drawn outside dropout is ``u < p`` (JAX's own definition,
and tf_keras's ``random_bernoulli``). The recorder marks the uniforms TF's dropout drew,
and the injector takes the convention the draw came with. Keys are ignored. A draw of another kind or
shape than Keras's next one, or a count that differs, means the two sides do not draw
alike: ``DrawsDoNotLineUp``, and the case falls back to comparing the outputs that do not
depend on the draws (``replay.py``), saying so.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

#: TF raw ops (module, name) -> kind of draw
TF_SAMPLERS = (
    ("gen_random_ops", "random_standard_normal", "normal"),
    ("gen_random_ops", "random_uniform", "uniform"),
    ("gen_stateless_random_ops_v2", "stateless_random_normal_v2", "normal"),
    ("gen_stateless_random_ops_v2", "stateless_random_uniform_v2", "uniform"),
    ("gen_stateless_random_ops", "stateless_random_normal", "normal"),
    ("gen_stateless_random_ops", "stateless_random_uniform", "uniform"),
)
#: samplers tern cannot inject (integer draws, truncated normals, categorical, Poisson, gamma,
#: binomial, stateless shuffles, and ``tf.random.Generator``'s stateful ops)
TF_OTHER = (
    ("gen_random_ops", "random_uniform_int"), ("gen_random_ops", "truncated_normal"),
    ("gen_random_ops", "parameterized_truncated_normal"), ("gen_random_ops", "multinomial"),
    ("gen_random_ops", "random_poisson"), ("gen_random_ops", "random_poisson_v2"), ("gen_random_ops", "random_gamma"),
    ("gen_stateless_random_ops", "stateless_random_uniform_int"),
    ("gen_stateless_random_ops", "stateless_random_uniform_full_int"),
    ("gen_stateless_random_ops", "stateless_truncated_normal"),
    ("gen_stateless_random_ops", "stateless_parameterized_truncated_normal"),
    ("gen_stateless_random_ops", "stateless_multinomial"), ("gen_stateless_random_ops", "stateless_random_binomial"),
    ("gen_stateless_random_ops", "stateless_random_gamma_v2"), ("gen_stateless_random_ops", "stateless_random_poisson"),
    ("gen_stateless_random_ops_v2", "stateless_random_uniform_int_v2"),
    ("gen_stateless_random_ops_v2", "stateless_random_uniform_full_int_v2"),
    ("gen_stateless_random_ops_v2", "stateless_truncated_normal_v2"),
    ("gen_stateless_random_ops_v2", "stateless_random_gamma_v3"), ("gen_stateless_random_ops_v2", "stateless_shuffle"),
    ("gen_stateful_random_ops", "stateful_standard_normal_v2"), ("gen_stateful_random_ops", "stateful_uniform"),
    ("gen_stateful_random_ops", "stateful_uniform_int"), ("gen_stateful_random_ops", "stateful_uniform_full_int"),
    ("gen_stateful_random_ops", "stateful_truncated_normal"), ("gen_stateful_random_ops", "stateful_random_binomial"),
)
#: a uniform TF's dropout drew (it keeps ``u >= rate``)
DROPOUT = "uniform/dropout"
#: the order ``tf.random.shuffle`` put a tensor's rows in (``jax.random.permutation``'s)
PERMUTATION = "permutation"


class DrawsDoNotLineUp(Exception):
    """The translation draws otherwise than Keras did (kind, shape or count)."""


class DrawTape:
    """TF side: ``with tape.recording():`` keeps the call's draws in ``tape.draws``;
    ``with tape.replaying(draws):`` hands them back in order. ``tape.other`` counts draws of
    kinds that cannot be injected."""

    def __init__(self) -> None:
        self.draws: list[tuple[str, np.ndarray]] = []
        self.other = 0
        self._replay: list[tuple[str, np.ndarray]] | None = None
        self._active = False
        self._in_dropout = 0

    @contextlib.contextmanager
    def installed(self):
        """The samplers wrapped for the duration (idle unless recording or replaying)."""
        from tensorflow.python.ops import (gen_random_ops, gen_stateful_random_ops, gen_stateless_random_ops,
                                           gen_stateless_random_ops_v2, nn_ops)

        modules = {"gen_random_ops": gen_random_ops, "gen_stateless_random_ops": gen_stateless_random_ops,
                   "gen_stateless_random_ops_v2": gen_stateless_random_ops_v2,
                   "gen_stateful_random_ops": gen_stateful_random_ops}
        undo = [(nn_ops, "_dropout", nn_ops._dropout)]  # noqa: PLC2701 - every TF dropout ends there
        nn_ops._dropout = self._dropout(nn_ops._dropout)  # noqa: PLC2701
        for module_name, name, kind in TF_SAMPLERS:
            module = modules[module_name]
            if hasattr(module, name):
                undo.append((module, name, getattr(module, name)))
                setattr(module, name, self._sampler(getattr(module, name), kind))
        undo.append((gen_random_ops, "random_shuffle", gen_random_ops.random_shuffle))
        gen_random_ops.random_shuffle = self._shuffler(gen_random_ops.random_shuffle)
        for module_name, name in TF_OTHER:
            module = modules[module_name]
            if hasattr(module, name):
                undo.append((module, name, getattr(module, name)))
                setattr(module, name, self._counted(getattr(module, name)))
        try:
            yield self
        finally:
            for module, name, original in reversed(undo):
                setattr(module, name, original)

    def _dropout(self, original: Any):
        tape = self

        def dropout(*args, **kwargs):
            tape._in_dropout += 1
            try:
                return original(*args, **kwargs)
            finally:
                tape._in_dropout -= 1

        return dropout

    def _sampler(self, original: Any, kind: str):
        tape = self

        def sampler(*args, **kwargs):
            if not tape._active:
                return original(*args, **kwargs)
            if tape._replay is None:
                value = original(*args, **kwargs)
                tape.draws.append((DROPOUT if kind == "uniform" and tape._in_dropout else kind, np.array(value.numpy())))
                return value
            if not tape._replay:
                raise DrawsDoNotLineUp("TF drew more than when recorded")
            recorded_kind, array = tape._replay.pop(0)
            import tensorflow as tf

            if recorded_kind.split("/")[0] != kind:
                raise DrawsDoNotLineUp(f"TF drew a {kind} where it drew a {recorded_kind}")
            return tf.constant(array)

        return sampler

    def _shuffler(self, original: Any):
        """``tf.random.shuffle`` as TF's own shuffle of the row indices, then a gather: the
        indices are the draw (the same distribution as shuffling the rows themselves)."""
        tape = self

        def shuffle(value, seed=0, seed2=0, name=None):
            import tensorflow as tf

            if not tape._active or not tf.executing_eagerly():
                if tape._active:
                    tape.other += 1
                return original(value, seed=seed, seed2=seed2, name=name)
            if tape._replay is None:
                order = original(tf.range(tf.shape(value)[0]), seed=seed, seed2=seed2)
                tape.draws.append((PERMUTATION, np.array(order.numpy())))
            else:
                if not tape._replay:
                    raise DrawsDoNotLineUp("TF drew more than when recorded")
                recorded_kind, array = tape._replay.pop(0)
                if recorded_kind != PERMUTATION:
                    raise DrawsDoNotLineUp(f"TF shuffled where it drew a {recorded_kind}")
                order = tf.constant(array)
            return tf.gather(value, order)

        return shuffle

    def _counted(self, original: Any):
        tape = self

        def sampler(*args, **kwargs):
            if tape._active:
                tape.other += 1
            return original(*args, **kwargs)

        return sampler

    @property
    def left(self) -> int:
        """Draws handed back but not yet taken (while replaying)."""
        return len(self._replay or [])

    @contextlib.contextmanager
    def recording(self):
        self.draws, self.other, self._replay, self._active = [], 0, None, True
        try:
            yield self
        finally:
            self._active = False

    @contextlib.contextmanager
    def replaying(self, draws: list[tuple[str, np.ndarray]]):
        self.other, self._replay, self._active = 0, list(draws), True
        try:
            yield self
        finally:
            self._active, self._replay = False, None


def pack_draws(draws: list[tuple[str, np.ndarray]], arrays: list[np.ndarray]) -> list[dict]:
    start = len(arrays)
    arrays.extend(array for _, array in draws)
    return [{"kind": kind, "array": start + i, "shape": list(array.shape)} for i, (kind, array) in enumerate(draws)]


def forget_traces() -> None:
    """``jax.clear_caches()`` but for the executables JAX compiles per primitive, around an
    eager (``jax.disable_jit()``) run with draws injected.

    Eagerly, a draw reaches each primitive as an operand: no executable holds one, and no
    jitted function is traced (``disable_jit`` calls it as Python). What could keep a draw is
    a trace cache (a jaxpr staged on the way, its constants included), and those are cleared.
    Clearing the per-primitive executables too made each eager step compile its primitives
    again: a WGAN-GP step (174 primitives) took 14 s with them cleared and 0.8 s kept. A JAX
    whose internals differ gets the full clear."""
    import jax

    try:
        from jax._src import dispatch, util  # noqa: PLC2701 - the caches jax.clear_caches() clears, one kept

        caches, kept = list(util._caches.keys()), dispatch.xla_primitive_callable
    except (ImportError, AttributeError):
        jax.clear_caches()
        return
    for cache in caches:
        if cache is not kept:
            cache.cache_clear()


class Injector:
    """JAX side: ``with injector.injected():`` around one trace (or eager run) of the
    translation; the recorded draws are handed out from the first again each time."""

    def __init__(self, draws: list[dict], arrays: Any) -> None:
        self.draws = [(d["kind"], np.asarray(arrays[f"a{d['array']}"])) for d in draws]
        self.used = 0

    def _next(self, kind: str, shape: tuple) -> tuple[str, np.ndarray]:
        if self.used >= len(self.draws):
            raise DrawsDoNotLineUp(f"the translation draws more than Keras's {len(self.draws)} draws "
                                   f"(a {kind} of shape {list(shape)})")
        recorded_kind, array = self.draws[self.used]
        if recorded_kind.split("/")[0] != kind or tuple(array.shape) != tuple(shape):
            raise DrawsDoNotLineUp(f"draw {self.used + 1}: the translation draws a {kind} of shape {list(shape)}, "
                                   f"Keras drew a {recorded_kind} of shape {list(array.shape)}")
        self.used += 1
        return recorded_kind, array

    @contextlib.contextmanager
    def injected(self):
        import jax
        import jax.numpy as jnp

        injector = self
        originals = {name: getattr(jax.random, name) for name in ("normal", "uniform", "bernoulli", "permutation")}

        def normal(key, shape=(), dtype=None, **_):
            return jnp.asarray(injector._next("normal", tuple(shape))[1], dtype or jnp.result_type(float))

        def uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0, **_):
            u = jnp.asarray(injector._next("uniform", tuple(shape))[1], dtype or jnp.result_type(float))
            return minval + (maxval - minval) * u

        def bernoulli(key, p=0.5, shape=None, **_):
            shape = jnp.shape(p) if shape is None else tuple(shape)
            kind, u = injector._next("uniform", shape)
            p = jnp.asarray(p, jnp.float32)
            return jnp.asarray(u) >= 1 - p if kind == DROPOUT else jnp.asarray(u) < p

        def permutation(key, x, axis=0, independent=False):
            if independent:
                raise DrawsDoNotLineUp("the translation permutes independently along an axis; Keras shuffled rows")
            whole = isinstance(x, (int, np.integer)) or np.ndim(x) == 0
            n = int(x) if whole else jnp.shape(x)[axis]
            order = jnp.asarray(injector._next(PERMUTATION, (n,))[1])
            return order if whole else jnp.take(jnp.asarray(x), order, axis=axis)

        self.used = 0
        jax.random.normal, jax.random.uniform, jax.random.bernoulli = normal, uniform, bernoulli
        jax.random.permutation = permutation
        try:
            yield self
        finally:
            for name, original in originals.items():
                setattr(jax.random, name, original)
        if self.used != len(self.draws):
            raise DrawsDoNotLineUp(f"the translation drew {self.used} of Keras's {len(self.draws)} draws")
