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
