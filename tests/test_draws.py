"""Random draws recorded from TF and injected into JAX (``tern/verify/draws.py``): Keras's
own sampling layers against the Flax ones a translation uses, on the same draws."""

from __future__ import annotations

import numpy as np
import pytest

from tern.verify.draws import DROPOUT, PERMUTATION, DrawsDoNotLineUp, DrawTape, Injector, forget_traces, pack_draws


def _injector(draws: list[tuple[str, np.ndarray]]) -> Injector:
    arrays: list[np.ndarray] = []
    packed = pack_draws(draws, arrays)
    return Injector(packed, {f"a{i}": a for i, a in enumerate(arrays)})


@pytest.fixture(scope="module")
def tf():
    import tensorflow as tf

    return tf


def _recorded(tf, layer, x, **kwargs):
    """The layer's output on ``x`` with its draws, and its output again with the draws handed back."""
    tape = DrawTape()
    with tape.installed():
        with tape.recording():
            first = np.asarray(layer(x, **kwargs))
        draws = list(tape.draws)
        with tape.replaying(draws):
            again = np.asarray(layer(x, **kwargs))
    return first, again, draws


def test_keras_dropout_and_flax_dropout_agree_on_the_same_draws(tf):
    import flax.linen as nn
    import jax
    import keras

    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    keras_out, again, draws = _recorded(tf, keras.layers.Dropout(0.3), x, training=True)
    np.testing.assert_array_equal(keras_out, again)  # handed back, TF reproduces its own call
    assert [kind for kind, _ in draws] == [DROPOUT]
    injector = _injector(draws)
    with injector.injected():
        flax_out = nn.Dropout(0.3).apply({}, x, deterministic=False, rngs={"dropout": jax.random.key(0)})
    np.testing.assert_allclose(np.asarray(flax_out), keras_out, rtol=1e-6, atol=1e-6)
    # and with other draws the outputs differ: the comparison depends on the injection
    assert not np.allclose(np.asarray(nn.Dropout(0.3).apply({}, x, deterministic=False,
                                                             rngs={"dropout": jax.random.key(0)})), keras_out)


def test_a_sampled_normal_and_uniform_reach_the_translation_scaled_as_it_asks(tf):
    import jax
    import jax.numpy as jnp

    tape = DrawTape()
    with tape.installed(), tape.recording():
        z = (2.0 + 0.5 * tf.random.normal((3, 2))).numpy()
        u = tf.random.uniform((5,), minval=-1.0, maxval=3.0).numpy()
    injector = _injector(tape.draws)

    def translation(key):
        return 2.0 + 0.5 * jax.random.normal(key, (3, 2)), jax.random.uniform(key, (5,), minval=-1.0, maxval=3.0)

    with injector.injected():
        got_z, got_u = jax.jit(translation)(jax.random.key(0))
    np.testing.assert_allclose(np.asarray(got_z), z, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(got_u), u, rtol=1e-6, atol=1e-6)
    assert jnp.asarray(got_z).shape == (3, 2)


def test_a_bernoulli_outside_dropout_keeps_u_below_p():
    import jax

    u = np.array([0.1, 0.5, 0.9], np.float32)
    with _injector([("uniform", u)]).injected():
        mask = jax.random.bernoulli(jax.random.key(0), 0.6, (3,))
    assert np.asarray(mask).tolist() == [True, True, False]
    with _injector([(DROPOUT, u)]).injected():  # TF's dropout keeps u >= rate = 1 - p
        mask = jax.random.bernoulli(jax.random.key(0), 0.6, (3,))
    assert np.asarray(mask).tolist() == [False, True, True]


@pytest.mark.parametrize("translation, message", [
    (lambda key: jax_random().normal(key, (2, 3)), r"shape \[2, 3\], Keras drew a normal of shape \[3, 2\]"),  # another shape
    (lambda key: jax_random().uniform(key, (3, 2)), "draws a uniform"),      # another kind
    (lambda key: 0.0 * jax_random().normal(key, (3, 2)) + jax_random().normal(key, (3, 2)), "draws more"),
    (lambda key: 0.0, "drew 0 of Keras's 1"),                                 # fewer
])
def test_draws_that_do_not_line_up_are_said_so(translation, message):
    import jax

    injector = _injector([("normal", np.zeros((3, 2), np.float32))])
    with pytest.raises(DrawsDoNotLineUp, match=message):
        with injector.injected():
            translation(jax.random.key(0))


def jax_random():
    import jax

    return jax.random


def test_draws_tern_cannot_inject_are_counted(tf):
    tape = DrawTape()
    with tape.installed(), tape.recording():
        tf.random.truncated_normal((3,))
        tf.random.uniform((2,), maxval=9, dtype=tf.int32)
    assert tape.other == 2 and tape.draws == []


def test_the_patches_are_undone(tf):
    import jax
    from tensorflow.python.ops import gen_random_ops

    before = (gen_random_ops.random_standard_normal, gen_random_ops.random_shuffle, jax.random.normal,
              jax.random.permutation)
    tape = DrawTape()
    with tape.installed():
        pass
    with _injector([]).injected():
        pass
    assert (gen_random_ops.random_standard_normal, gen_random_ops.random_shuffle, jax.random.normal,
            jax.random.permutation) == before


def test_a_shuffle_is_recorded_as_its_row_order_and_injected_into_jax_permutation(tf):
    import jax
    import jax.numpy as jnp

    rows = np.arange(12, dtype=np.float32).reshape(6, 2)
    tape = DrawTape()
    with tape.installed():
        with tape.recording():
            shuffled = np.asarray(tf.random.shuffle(rows))
            order = np.asarray(tf.random.shuffle(tf.range(5)))
        draws = list(tape.draws)
        assert [kind for kind, _ in draws] == [PERMUTATION, PERMUTATION] and tape.other == 0
        np.testing.assert_array_equal(shuffled, rows[draws[0][1]])  # the rows, in the recorded order
        with tape.replaying(draws):  # handed back, TF reproduces its own call
            np.testing.assert_array_equal(np.asarray(tf.random.shuffle(rows)), shuffled)
            np.testing.assert_array_equal(np.asarray(tf.random.shuffle(tf.range(5))), order)
    injector = _injector(draws)
    with injector.injected():
        got_rows = jax.random.permutation(jax.random.key(0), jnp.asarray(rows))
        got_order = jax.random.permutation(jax.random.key(0), 5)
    np.testing.assert_array_equal(np.asarray(got_rows), shuffled)
    np.testing.assert_array_equal(np.asarray(got_order), order)
    with pytest.raises(DrawsDoNotLineUp, match="permutation of shape \\[7\\]"):
        with _injector(draws).injected():
            jax.random.permutation(jax.random.key(0), 7)
    with pytest.raises(DrawsDoNotLineUp, match="independently"):
        with _injector(draws).injected():
            jax.random.permutation(jax.random.key(0), jnp.asarray(rows), independent=True)


def test_an_eager_injected_run_between_forget_traces_leaves_no_draw_behind_and_keeps_executables():
    """As the step replay runs one (``step_replay._call_step``): a function jitted and run
    before is run as Python under ``disable_jit``, so it takes the injected draw; afterwards
    it draws from its key again (nothing staged with the draw is reused). The executables of
    eager primitives survive (an eager step compiling them again took 14 s instead of 0.8 s)."""
    import jax
    from jax._src import dispatch, util  # noqa: PLC2701 - the cache forget_traces keeps, and the ones it clears

    @jax.jit
    def noise(key):
        return jax.random.normal(key, (3,)) * 2.0

    key = jax.random.key(0)
    drawn = np.asarray(noise(key))
    recorded = np.array([1.0, 2.0, 3.0], "float32")
    injector = _injector([("normal", recorded)])
    forget_traces()
    with jax.disable_jit(), injector.injected():
        injected = np.asarray(noise(key))
    eager = dispatch.xla_primitive_callable.cache_info().currsize
    assert eager > 0  # the eager run compiled its primitives
    forget_traces()
    assert dispatch.xla_primitive_callable.cache_info().currsize == eager
    staged = [c for c in util._caches if c is not dispatch.xla_primitive_callable and hasattr(c, "cache_info")]
    assert staged and all(c.cache_info().currsize == 0 for c in staged)  # trace and lowering caches: emptied
    np.testing.assert_array_equal(injected, recorded * 2.0)
    np.testing.assert_array_equal(np.asarray(noise(key)), drawn)
