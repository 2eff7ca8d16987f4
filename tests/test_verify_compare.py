"""The replay's value comparison: element by element, and for a value that fails in
float32, again against the translation's float64 result within its measured rounding."""

import numpy as np

from tern.verify.replay import against_float64
from tern.verify.tolerance import ROUNDING_CEILING, ROUNDING_FACTOR, compare


def _terms() -> np.ndarray:
    """64 gradient-like sums of 4096 terms each; most cancel to almost nothing."""
    terms = np.random.default_rng(0).normal(size=(64, 4096)) * 50
    terms[:, -1] = -terms[:, :-1].sum(axis=1)
    terms[:8, -1] += 3.0  # a few elements keep a real value
    return terms


def _float32_sum(terms: np.ndarray, reverse: bool) -> np.ndarray:
    """A float32 kernel's sum (numpy's pairwise summation), in one order or the other."""
    terms = terms.astype(np.float32)
    return (terms[:, ::-1] if reverse else terms).sum(axis=1, dtype=np.float32)


def test_rounding_of_a_sum_fails_element_wise_and_passes_against_float64():
    terms = _terms()
    keras, jax32, jax64 = _float32_sum(terms, False), _float32_sum(terms, True), terms.sum(axis=1)
    narrow = compare("d/d kernel", jax32, keras, None)
    assert not narrow["ok"]  # a cancelled element's rounding is a huge error relative to itself
    again = against_float64(narrow, ("d/d kernel", jax32, keras), jax64, None)
    assert again["ok"]
    assert again["rounding"] == float(np.abs(jax32.astype(np.float64) - jax64).max()) > 0
    assert again["float32"] == {"max_abs": narrow["max_abs"], "max_rel": narrow["max_rel"]}


def test_a_wrong_value_beyond_the_rounding_fails_against_float64_too():
    terms = _terms()
    jax32, jax64 = _float32_sum(terms, True), terms.sum(axis=1)
    rounding = float(np.abs(jax32.astype(np.float64) - jax64).max())  # about 2e-3: terms of 50, 4096 of them
    kept = terms.copy()
    kept[:8, -1] *= 1.01  # the closing term of eight sums scaled by 1.01
    for keras in (_float32_sum(kept, False),
                  _float32_sum(terms, False) + np.float32(0.05) * (np.arange(64) == 5)):  # one element off
        narrow = compare("d/d kernel", jax32, keras, None)
        again = against_float64(narrow, ("d/d kernel", jax32, keras), jax64, None)
        assert not narrow["ok"] and not again["ok"]
        assert again["max_abs"] > ROUNDING_FACTOR * rounding


def test_rounding_widens_the_bound_by_its_factor_only():
    want = np.array([1.0, 2.0], np.float32)
    off = np.float32(1e-5 + 1e-5 * 2.0 + ROUNDING_FACTOR * 1e-4)
    assert compare("y", want + np.array([0, off * 0.99], np.float32), want, None, rounding=1e-4)["ok"]
    assert not compare("y", want + np.array([0, off * 1.01], np.float32), want, None, rounding=1e-4)["ok"]
    assert not compare("y", want[:1], want, None, rounding=1.0)["ok"]  # shapes first, whatever the rounding


def test_a_float64_run_that_computes_something_else_excuses_nothing():
    """Dropout left on in inference draws differently in float32 and float64: their
    difference is no rounding, and must not widen the bound (it once excused 0.06 on
    softmax outputs); a value that failed stays failed, with the reason."""
    rng = np.random.default_rng(1)
    keras = rng.uniform(0, 1, (4, 5)).astype(np.float32)
    jax32 = keras * (rng.uniform(size=keras.shape) > 0.2) / 0.8  # one dropout mask
    jax64 = keras.astype(np.float64) * (rng.uniform(size=keras.shape) > 0.2) / 0.8  # another
    narrow = compare("output", jax32, keras, None)
    again = against_float64(narrow, ("output", jax32, keras), jax64, None)
    assert not narrow["ok"] and not again["ok"]
    assert "beyond float32 rounding" in again["problem"] and again["rounding"] > ROUNDING_CEILING

    # Keras's own float64 run (tern/verify/reference.py) has no dropout in inference: still off
    judged = against_float64(narrow, ("output", jax32, keras), jax64, None, keras64=keras.astype(np.float64))
    assert not judged["ok"] and judged["keras_float64"] and judged["max_abs"] > 0.1


def test_ill_conditioned_values_are_settled_by_both_sides_in_float64():
    """A batch normalisation over a constant input (variance 0, a gradient through
    1/sqrt(epsilon)) differs between float32 runs by far more than rounding, on both sides;
    in float64 a right translation agrees with Keras to float64 rounding, a wrong one does not."""
    truth = np.array([53.8, -12.5, 0.25])
    jax32 = (truth + np.array([89.9, 3.0, 0.1])).astype(np.float32)  # float32 far off
    keras = (truth - np.array([40.0, 1.0, 0.2])).astype(np.float32)
    narrow = compare("d/d input[0]", jax32, keras, None)
    assert not narrow["ok"]
    alone = against_float64(narrow, ("d/d input[0]", jax32, keras), truth, None)
    assert not alone["ok"] and "beyond float32 rounding" in alone["problem"]
    settled = against_float64(narrow, ("d/d input[0]", jax32, keras), truth, None, keras64=truth + 1e-12)
    assert settled["ok"] and settled["keras_float64"]
    wrong = against_float64(narrow, ("d/d input[0]", jax32, keras), truth * 1.01, None, keras64=truth)
    assert not wrong["ok"] and wrong["keras_float64"]
