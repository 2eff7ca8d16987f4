"""Probes beyond the tests' inputs (``tern/verify/probes.py``): which inputs, and how a value
found there is judged. The end-to-end check (a bug only a probe reveals, through the CLI) is
in ``test_verify.py``'s planted bugs."""

from __future__ import annotations

import numpy as np
import pytest

from tern.verify.arrays import pack
from tern.verify.probes import PROBES, judged_leaves, probe_checks, probe_inputs


def test_probes_transform_float_inputs_and_keep_their_dtype():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    found = dict(probe_inputs([x]))
    assert set(found) == {name for name, _ in PROBES}
    assert all(moved[0].dtype == np.float32 and moved[0].shape == x.shape for moved in found.values())
    np.testing.assert_allclose(found["inputs x 1e-3"][0], x * 1e-3)
    near = found["inputs near their mean (last axis)"][0]
    np.testing.assert_allclose(near.mean(axis=-1), x.mean(axis=-1), rtol=1e-6)
    np.testing.assert_allclose(near.var(axis=-1), x.var(axis=-1) * 1e-6, rtol=1e-3)


def test_a_probe_that_leaves_the_input_as_it_was_is_left_out():
    zeros = np.zeros((2, 3), np.float32)
    assert [name for name, _ in probe_inputs([zeros])] == ["inputs + 3"]
    assert probe_inputs([np.float32(0.0) * np.ones(())]) == []  # a scalar input is kept as it is


def test_outputs_keras_gives_as_nan_or_sampled_are_not_compared():
    outputs = [np.ones(3), np.array([1.0, np.inf]), np.array([1, 2]), np.ones(2)]
    assert judged_leaves(outputs, left_out={3}) == [0, 2]


def _probe(name: str, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> tuple[list[dict], list[np.ndarray]]:
    arrays: list[np.ndarray] = []
    probe = {"name": name, "inputs": pack(inputs, arrays), "outputs": pack(outputs, arrays),
             "compared": list(range(len(outputs)))}
    return [probe], {f"a{i}": a for i, a in enumerate(arrays)}


def test_a_difference_beyond_rounding_is_a_mismatch_named_with_its_probe():
    probes, arrays = _probe("inputs x 1e-3", [np.ones(4, np.float32)], [np.full(4, 0.5, np.float32)])
    checks = probe_checks(probes, arrays, lambda f: [np.full(4, 0.6, np.float32)],
                          lambda f: [np.full(4, 0.6, np.float64)], None)
    assert [c["name"] for c in checks] == ["[0] @ inputs x 1e-3"]  # the first output, at the probe
    assert not checks[0]["ok"] and checks[0]["max_abs"] == pytest.approx(0.1, rel=1e-5)


def test_float32_rounding_measured_against_float64_is_excused():
    keras = np.full(4, 1.0, np.float32)
    narrow = keras + 4e-5  # beyond atol + rtol: 2e-5
    wide = keras.astype(np.float64) + 1e-6  # the translation's own float32 rounding: 3.9e-5
    probes, arrays = _probe("inputs x 100", [np.ones(4, np.float32)], [keras])
    checks = probe_checks(probes, arrays, lambda f: [narrow], lambda f: [wide], None)
    assert checks[0]["ok"] and checks[0]["rounding"] == pytest.approx(3.9e-5, rel=1e-2)


def test_an_ill_conditioned_value_is_not_judged_and_says_so():
    probes, arrays = _probe("inputs near their mean (last axis)", [np.ones(4, np.float32)], [np.zeros(4, np.float32)])
    checks = probe_checks(probes, arrays, lambda f: [np.full(4, 0.3, np.float32)],
                          lambda f: [np.full(4, 0.0, np.float64)], None)
    assert checks[0]["ok"] and "ill-conditioned" in checks[0]["not_judged"]


def test_a_wrong_number_of_outputs_is_a_mismatch():
    probes, arrays = _probe("inputs + 3", [np.ones(2, np.float32)], [np.ones(2, np.float32), np.ones(2, np.float32)])
    checks = probe_checks(probes, arrays, lambda f: [np.ones(2, np.float32)], lambda f: [np.ones(2)], None)
    assert not checks[0]["ok"] and "1 outputs, keras gave 2" in checks[0]["problem"]


def test_keras_float64_settles_a_value_keras_rounds_worse_than_the_translation():
    """Keras's float32 sum lost terms the translation kept (``test_verify_reference.py``):
    only Keras's own float64 run at the probe tells the right translation from a wrong one."""
    probes, arrays = _probe("inputs x 100", [np.ones(2, np.float32)], [np.zeros(2, np.float32)])
    exact = lambda f: [np.full(2, 256.0)]  # noqa: E731 - the translation, float32 and float64 alike
    right = probe_checks(probes, arrays, exact, exact, None, {"inputs x 100": [np.full(2, 256.0)]})
    assert right[0]["ok"] and right[0]["keras_float64"]
    wrong = probe_checks(probes, arrays, exact, exact, None, {"inputs x 100": [np.full(2, 255.0)]})
    assert not wrong[0]["ok"] and wrong[0]["keras_float64"]
    unsettled = probe_checks(probes, arrays, exact, exact, None)
    assert not unsettled[0]["ok"]
