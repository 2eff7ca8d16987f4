"""The JAX worker's answers to Flax's parameter-shape checks (tern/sandbox/param_checks.py):
an apply gives the same values, a parameter of the wrong shape is still refused, and a
different initializer or argument is never answered from another's entry."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import errors

from tern.sandbox import param_checks


@pytest.fixture
def checks():
    assert param_checks.install()
    param_checks.uninstall()  # empty, whatever ran before
    assert param_checks.install()
    before = dict(param_checks.stats)
    yield lambda: {k: param_checks.stats[k] - before[k] for k in before}
    param_checks.uninstall()


class _Net(nn.Module):
    features: int = 4

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(3, (3, 3))(x)
        return nn.Dense(self.features)(x.reshape(x.shape[0], -1))


def _variables(features: int = 4):
    x = jnp.linspace(-1.0, 1.0, 2 * 5 * 5 * 2).reshape(2, 5, 5, 2)
    return x, _Net(features).init(jax.random.key(0), x)


def test_an_apply_is_answered_and_gives_the_same_values(checks):
    x, variables = _variables()
    param_checks.uninstall()
    plain = _Net().apply(variables, x)
    assert param_checks.install()
    first = _Net().apply(variables, x)
    second = _Net().apply(variables, x)
    assert checks() == {"hits": 4, "misses": 4}  # kernel and bias of two layers, traced once each
    np.testing.assert_array_equal(np.asarray(first), np.asarray(plain))
    np.testing.assert_array_equal(np.asarray(second), np.asarray(plain))


def test_a_parameter_of_the_wrong_shape_is_still_refused(checks):
    x, variables = _variables()
    _Net().apply(variables, x)  # every check answered from here on
    params = variables["params"]
    wrong = {"params": {**params, "Dense_0": {**params["Dense_0"], "kernel": jnp.ones((75, 5))}}}
    with pytest.raises(errors.ScopeParamShapeError, match="Dense_0"):
        _Net().apply(wrong, x)
    assert checks()["hits"] >= 3


def test_other_arguments_are_checked_on_their_own(checks):
    x, four = _variables(4)
    _, five = _variables(5)
    _Net(4).apply(four, x)
    misses = checks()["misses"]
    _Net(5).apply(five, x)  # the same initializers, another shape: the Dense kernel and bias miss
    assert checks()["misses"] == misses + 2
    with pytest.raises(errors.ScopeParamShapeError):
        _Net(5).apply(four, x)  # the answer for 4 features is not given for 5


def test_a_new_initializer_object_is_traced_again(checks):
    """An edited module makes its initializers again: equal code, another object."""

    def made(scale):
        def init(key, shape, dtype=jnp.float32):
            return jax.random.normal(key, shape, dtype) * scale
        return init

    class Scaled(nn.Module):
        initializer: object

        @nn.compact
        def __call__(self, x):
            return x * self.param("w", self.initializer, x.shape[-1:])

    x = jnp.ones((2, 3))
    first, second = made(1.0), made(1.0)
    variables = Scaled(first).init(jax.random.key(0), x)
    Scaled(first).apply(variables, x)
    Scaled(first).apply(variables, x)
    Scaled(second).apply(variables, x)
    assert checks() == {"hits": 1, "misses": 2}


def test_x64_and_unhashable_arguments_are_kept_apart(checks):
    class Table(nn.Module):
        @nn.compact
        def __call__(self, x):  # an array among the initializer's arguments: not hashable
            return x + self.param("t", lambda key, like: jnp.zeros_like(like), np.zeros(3, np.float32))

    x = jnp.ones((3,))
    variables = Table().init(jax.random.key(0), x)
    Table().apply(variables, x)
    Table().apply(variables, x)
    assert checks() == {"hits": 0, "misses": 0}
    x, variables = _variables()
    _Net().apply(variables, x)
    with jax.enable_x64(True):
        _Net().apply(variables, x)
    assert checks()["misses"] == 8


def test_other_calls_go_to_jax_and_uninstall_restores_it(checks):
    assert jax.eval_shape(lambda a: a * 2, jnp.ones(3)).shape == (3,)
    assert checks() == {"hits": 0, "misses": 0}
    assert param_checks.install()  # twice: wrapped once
    assert not getattr(jax.eval_shape.__wrapped__, "_tern_param_checks", False)
    param_checks.uninstall()
    assert not getattr(jax.eval_shape, "_tern_param_checks", False)


def test_a_library_initializer_made_again_counts_as_what_it_closes_over(checks):
    """``glorot_uniform()`` written out in ``setup`` is a new closure at every apply."""

    class Written(nn.Module):
        scale: float = 1.0

        def setup(self):
            self.dense = nn.Dense(3, kernel_init=nn.initializers.variance_scaling(self.scale, "fan_avg", "uniform"))

        def __call__(self, x):
            return self.dense(x)

    x = jnp.ones((2, 5))
    variables = Written().init(jax.random.key(0), x)
    Written().apply(variables, x)
    Written().apply(variables, x)
    assert checks() == {"hits": 2, "misses": 2}  # the kernel's factory closure and the bias's default
    Written(2.0).apply(variables, x)  # another scale closed over: the kernel is traced again
    assert checks() == {"hits": 3, "misses": 3}


def test_a_shape_given_as_a_list_is_answered_and_told_apart_from_a_tuple(checks):
    """Flax's normalization layers give their scale's and bias's shapes as lists."""
    x = jnp.linspace(-1.0, 1.0, 12).reshape(3, 4)
    norm = nn.BatchNorm(use_running_average=True)
    variables = norm.init(jax.random.key(0), x)
    plain = norm.apply(variables, x)
    norm.apply(variables, x)
    assert checks() == {"hits": 2, "misses": 2}  # scale and bias, traced once each
    np.testing.assert_array_equal(np.asarray(norm.apply(variables, x)), np.asarray(plain))
    wrong = {**variables, "params": {**variables["params"], "scale": jnp.ones((5,))}}
    with pytest.raises(errors.ScopeParamShapeError, match="scale"):
        norm.apply(wrong, x)

    seen = []

    def recording(key, shape, dtype=jnp.float32):
        seen.append(type(shape))
        return jnp.zeros(tuple(shape), dtype)

    class Both(nn.Module):
        @nn.compact
        def __call__(self, x):
            return x + self.param("a", recording, [4]) + self.param("b", recording, (4,))

    variables = Both().init(jax.random.key(0), x)
    Both().apply(variables, x)
    Both().apply(variables, x)
    assert seen == [list, tuple, list, tuple]  # init, then one check each: the list's entry is not the tuple's
