"""The JAX worker's lowering cache (tern/sandbox/lowerings.py): an equal computation reuses
its executable, and anything that computes differently never does."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tern.sandbox import lowerings


@pytest.fixture
def cache():
    assert lowerings.install()
    lowerings.uninstall()  # empty, whatever ran before
    assert lowerings.install()
    before = dict(lowerings.stats)
    yield lambda: {k: lowerings.stats[k] - before[k] for k in before}
    lowerings.uninstall()


def _module(constant, scale: float = 2.0):
    """What an edited module gives again: new function objects, maybe the same computation."""
    table = jnp.asarray(constant, jnp.float32)

    def step(x):
        y = jax.nn.relu(x) * scale + table
        return jax.lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] * 2.0 + table), (0, y))[1]

    return step


def test_an_equal_computation_reuses_its_executable(cache):
    x = jnp.linspace(-1.0, 1.0, 3)
    first = jax.jit(_module([1.0, 2.0, 3.0]))(x)
    misses = cache()["misses"]
    again = jax.jit(_module([1.0, 2.0, 3.0]))(x)
    assert cache()["hits"] == 1 and cache()["misses"] == misses
    np.testing.assert_array_equal(first, again)


@pytest.mark.parametrize("other", [
    {"constant": [1.0, 2.0, 4.0]},  # a closed-over array's value: a constant, not printed
    {"constant": [1.0, 2.0, 3.0], "scale": 2.5},  # a literal
])
def test_a_different_value_is_a_different_computation(cache, other):
    x = jnp.linspace(-1.0, 1.0, 3)
    jax.jit(_module([1.0, 2.0, 3.0]))(x)
    got = jax.jit(_module(**other))(x)
    assert cache()["hits"] == 0
    with jax.disable_jit():
        want = _module(**other)(x)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_constants_of_a_nested_jaxpr_count(cache):
    """JAX hoists a branch's closed-over array into the outer jaxpr's constants (the first
    half), but a nested closed jaxpr may keep constants of its own, which the printed text
    leaves out: the key digests them (the second half, a jaxpr made so)."""
    def branchy(table):
        return lambda x, p: jax.lax.cond(p, lambda v: v + table, lambda v: v - table, x)

    x = jnp.zeros(3)
    jax.jit(branchy(np.arange(3.0, dtype=np.float32)))(x, True)
    got = jax.jit(branchy(np.arange(3.0, dtype=np.float32) * 10))(x, True)
    np.testing.assert_array_equal(got, [0.0, 10.0, 20.0])

    outer = jax.jit(lambda v, p: jax.lax.cond(p, lambda w: w + 1.0, lambda w: w - 1.0, v)).trace(x, True).jaxpr

    def with_branch_constants(table):
        branch = jax.make_jaxpr(lambda w: w + table)(x)  # a closed jaxpr holding the table as its constant
        assert branch.consts
        eqns = [e.replace(params={**e.params, "branches": (branch, branch)}) if "branches" in e.params else e
                for e in outer.jaxpr.eqns]
        return outer.replace(jaxpr=outer.jaxpr.replace(eqns=eqns))

    ones, tens = (with_branch_constants(np.arange(3.0, dtype=np.float32) * k) for k in (1, 10))
    assert str(ones) == str(tens)
    key = lambda closed: lowerings._key(closed, (), None, None, None)  # noqa: E731
    assert key(ones) is not None and key(ones) != key(tens)
    assert key(ones) == key(with_branch_constants(np.arange(3.0, dtype=np.float32)))


def test_weak_types_and_precision_modes_are_kept_apart(cache):
    weak = jax.jit(lambda v: v * 2)(2.0)
    strong = jax.jit(lambda v: v * 2)(jnp.float32(2.0))
    assert weak.weak_type and not strong.weak_type
    with jax.enable_x64(True):
        wide = jax.jit(lambda v: v * 2)(np.float64(2.0))
    assert wide.dtype == np.float64
    assert cache()["hits"] == 0


def test_a_changed_derivative_rule_is_a_different_gradient(cache):
    """A custom_jvp prints its rule by name only; a gradient traces through the rule, so
    its jaxpr differs."""
    def with_rule(factor):
        @jax.custom_jvp
        def f(x):
            return jnp.sin(x)

        f.defjvp(lambda primals, tangents: (f(primals[0]), factor * tangents[0]))
        return f

    x = jnp.float32(0.3)
    assert jax.jit(with_rule(1.0))(x) == jax.jit(with_rule(2.0))(x)  # the forward pass is shared
    assert jax.jit(jax.grad(with_rule(1.0)))(x) == 1.0
    assert jax.jit(jax.grad(with_rule(2.0)))(x) == 2.0


def test_callbacks_are_never_reused(cache):
    def calling(factor):
        return lambda v: jax.pure_callback(lambda a: np.asarray(a) * factor, jax.ShapeDtypeStruct(v.shape, v.dtype), v)

    x = jnp.ones(2)
    np.testing.assert_array_equal(jax.jit(calling(3.0))(x), [3.0, 3.0])
    np.testing.assert_array_equal(jax.jit(calling(4.0))(x), [4.0, 4.0])
    assert cache()["hits"] == 0 and cache()["refused"] >= 2


def test_uninstall_gives_jax_its_lowering_back(cache):
    from jax._src import pjit  # noqa: PLC2701 - what install wraps

    lowerings.uninstall()
    assert not getattr(pjit._pjit_lower, "_tern_by_content", False)
    assert lowerings.install() and lowerings.install()  # twice: wrapped once
    assert pjit._pjit_lower.__wrapped__ is not None and not getattr(pjit._pjit_lower.__wrapped__, "_tern_by_content", False)


_SEEN_IN_ANOTHER_PROCESS = """
import jax, jax.numpy as jnp
from tern.sandbox import lowerings
lowerings.install()
table = jnp.asarray([1.0, 2.0, 3.0], jnp.float32)
def step(x):
    return jax.lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] * 2.0 + table), (0, jax.nn.relu(x) * 2.0 + table))[1]
with lowerings.computations_seen() as seen:
    jax.jit(step)(jnp.linspace(-1.0, 1.0, 3))
print([digest for name, digest, _ in seen if name == "step"][0])
"""


def test_a_computation_seen_is_named_alike_in_every_process_and_by_its_values(cache):
    """What the search names a translation's computation by (``search_replay._computation``):
    an equal computation gets the same name in another worker process; another value does not."""
    import subprocess
    import sys

    x = jnp.linspace(-1.0, 1.0, 3)
    with lowerings.computations_seen() as seen:
        jax.jit(_module([1.0, 2.0, 3.0]))(x)
        jax.jit(_module([1.0, 2.0, 3.0]))(x)  # found again in the cache: still seen
        jax.jit(_module([1.0, 2.0, 4.0]))(x)
    steps = [(digest, custom) for name, digest, custom in seen if name == "step"]
    assert len(steps) == 3 and all(digest for digest, _ in steps)
    assert all(custom for _, custom in steps)  # jax.nn.relu is a custom_jvp of its own
    assert steps[0][0] == steps[1][0] != steps[2][0]
    other = subprocess.run([sys.executable, "-c", _SEEN_IN_ANOTHER_PROCESS], capture_output=True, text=True,
                           check=True, timeout=120)
    assert other.stdout.split()[-1] == steps[0][0]
    closed = len(seen)
    with lowerings.computations_seen() as later:
        jax.jit(_module([1.0, 2.0, 3.0]))(x)
    assert [d for name, d, _ in later if name == "step"] == [steps[0][0]]
    assert len(seen) == closed  # a block sees only its own


def test_a_custom_derivative_rule_is_told_and_a_callback_is_not_named(cache):
    @jax.custom_jvp
    def f(x):
        return jnp.sin(x)

    f.defjvp(lambda primals, tangents: (f(primals[0]), tangents[0]))

    def ruled(x):
        return jax.lax.cond(x > 0, f, jnp.cos, x)  # the rule nested in a branch

    def calling(x):
        return jax.pure_callback(lambda a: a, jax.ShapeDtypeStruct((), jnp.float32), x)

    with lowerings.computations_seen() as seen:
        jax.jit(ruled)(jnp.float32(0.3))
        jax.jit(calling)(jnp.float32(0.3))
        jax.jit(jnp.cos)(jnp.float32(0.3))
    named = {name: (digest, custom) for name, digest, custom in seen}
    assert named["ruled"][0] and named["ruled"][1] is True
    assert named["cos"][0] and named["cos"][1] is False
    assert named["calling"] == (None, False)
