"""Training configurations replayed value by value (``record_config.py``, ``replay_config.py``).

Keras records what a package function configured (an optimizer it returns, the optimizer,
loss and metrics it compiles into a model); a translation of that function, written here
the way tern writes it (the fixture's ``_keras_compat.py``), is replayed against it. The
correct one matches; each planted bug (Adam's epsilon correction, a top-k's ``k``, a loss
on probabilities instead of logits, a bias correction a step late, a staircase schedule
made smooth) is a mismatch named by what differs.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tern.status import Status
from tern.verify.arrays import read_case
from tern.verify.record_config import record_config_call
from tern.verify.replay_config import replay_config_case

SUPPORT = Path(__file__).resolve().parents[1] / "fixtures" / "expected" / "train_classifier_fit" / "_keras_compat.py"

TRANSLATION = '''
import functools
import jax.numpy as jnp
import optax
from {package}._keras_compat import (KerasMeanMetricWrapper, KerasOptimizer, KerasTrainer, keras_loss,
                                     keras_sparse_categorical_crossentropy, keras_sparse_top_k_categorical_accuracy)


def adam(learning_rate, b2=0.999):
    return KerasOptimizer(optax.inject_hyperparams(optax.adam)(
        learning_rate=learning_rate, b2=b2, eps=lambda count: 1e-7 / jnp.sqrt(1 - b2 ** (count + 1))),
        learning_rate=learning_rate)


def compile_classifier(model, learning_rate=1e-2):
    KerasTrainer.of(model).compile(
        optimizer=adam(learning_rate),
        loss=functools.partial(keras_loss, keras_sparse_categorical_crossentropy, from_logits=True),
        metrics=[KerasMeanMetricWrapper(keras_sparse_top_k_categorical_accuracy, name="top2", k=2)],
    )
    return model


def make_optimizers(learning_rate=1e-3):
    return adam(learning_rate, b2=0.9), adam(learning_rate, b2=0.9)


def make_scheduled():
    schedule = optax.exponential_decay(init_value=0.1, transition_steps=10, decay_rate=0.5, staircase=True)
    return KerasOptimizer(optax.sgd(learning_rate=schedule), learning_rate=schedule)
'''

#: (name, text in TRANSLATION, its planted replacement, what the first difference names)
PLANTED = [
    ("epsilon", "jnp.sqrt(1 - b2 ** (count + 1))", "jnp.sqrt(1 + b2 ** (count + 1))", "@ gradients x 1e-06"),
    ("late_correction", "b2 ** (count + 1)", "b2 ** (count)", "optimizer step 1"),
    ("top_k", 'name="top2", k=2', 'name="top2", k=3', "metric top2"),
    ("probabilities", "from_logits=True", "from_logits=False", "loss SparseCategoricalCrossentropy"),
    ("schedule", "decay_rate=0.5, staircase=True", "decay_rate=0.5, staircase=False", "learning rate (ExponentialDecay)"),
]


class _Recorder(SimpleNamespace):
    def skip(self, origin, reason):
        self.skipped.append(reason)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Keras's side: ``compile_classifier(model)`` and ``make_optimizers()`` recorded."""
    import keras

    out = tmp_path_factory.mktemp("cases")
    recorder = _Recorder(out=out, per_target={}, max_per_target=3, seen=set(), cases=[], skipped=[], replaying=False)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.SparseTopKCategoricalAccuracy(k=2, name="top2")])
    record_config_call(recorder, "PACKAGE.model", "compile_classifier", (model,), {}, model, before={id(model): id(None)})
    optimizers = (keras.optimizers.Adam(1e-3, beta_2=0.9), keras.optimizers.Adam(1e-3, beta_2=0.9))
    record_config_call(recorder, "PACKAGE.model", "make_optimizers", (), {}, optimizers, before={})
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5, staircase=True)
    record_config_call(recorder, "PACKAGE.model", "make_scheduled", (), {}, keras.optimizers.SGD(schedule), before={})
    regressor = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    regressor.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")  # a loss by name: compile wraps it
    record_config_call(recorder, "PACKAGE.model", "compile_regressor", (regressor,), {}, regressor,
                       before={id(regressor): id(None)})
    assert not recorder.skipped, recorder.skipped
    return {case["target"].split(":")[1]: read_case(out, case["id"]) for case in recorder.cases}


def _translation(root: Path, package: str, text: str) -> None:
    (root / package).mkdir()
    (root / package / "__init__.py").write_text("")
    shutil.copy(SUPPORT, root / package / "_keras_compat.py")
    (root / package / "model.py").write_text(text.replace("{package}", package))


def _replay(recorded, root: Path, package: str, function: str) -> dict:
    meta, arrays = recorded[function]
    meta = {**meta, "origin": {**meta["origin"], "module": f"{package}.model"}}
    return replay_config_case(meta, arrays, None)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("translations")
    _translation(root, "cfg_correct", TRANSLATION)
    for name, correct, planted, _ in PLANTED:
        assert TRANSLATION.count(correct) >= 1, name
        _translation(root, f"cfg_{name}", TRANSLATION.replace(correct, planted))
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))


def test_what_keras_configured_is_recorded(recorded):
    meta, _ = recorded["compile_classifier"]
    (config,) = meta["configs"]
    assert config["at"] == ["call", 0, 0] and config["kind"] == "model"
    assert [t["scale"] for t in config["optimizer"]["trajectories"]] == [1.0, 1e-3, 1e-6]
    assert config["loss"]["name"] == "SparseCategoricalCrossentropy"
    assert [m["name"] for m in config["metrics"]] == ["top2"]
    meta, _ = recorded["make_optimizers"]
    assert [c["at"] for c in meta["configs"]] == [["result", 0], ["result", 1]]


def test_a_loss_given_by_name_is_recorded_with_its_value(recorded):
    """``loss="mse"``: Keras 3 keeps the wrapper ``compile`` puts around it out of
    ``keras.losses``; the recorder found it there only, and the configuration went unrecorded."""
    import numpy as np

    from tern.verify.arrays import unpack

    meta, arrays = recorded["compile_regressor"]
    (config,) = meta["configs"]
    loss = config["loss"]
    y_true, y_pred, value = (np.asarray(unpack(loss[k], arrays)) for k in ("y_true", "y_pred", "value"))
    assert loss["name"] == "mse"
    np.testing.assert_allclose(value, np.mean((y_true - y_pred) ** 2), rtol=1e-6)


@pytest.mark.parametrize("function", ["compile_classifier", "make_optimizers"])
def test_the_correct_translation_matches_every_value(recorded, packages, function):
    result = _replay(recorded, packages, "cfg_correct", function)
    assert result["status"] == Status.MATCH, result
    names = [c["name"] for c in result["outputs"]]
    assert len(names) == (3 * 4 + 1 + 2 if function == "compile_classifier" else 2 * 3 * 4), names
    assert all(c["ok"] for c in result["outputs"])


def test_a_schedule_is_compared_over_its_steps(recorded, packages):
    meta, _ = recorded["make_scheduled"]
    assert meta["configs"][0]["optimizer"]["schedule"]["name"] == "ExponentialDecay"
    result = _replay(recorded, packages, "cfg_correct", "make_scheduled")
    assert result["status"] == Status.MATCH, result
    assert result["outputs"][0]["name"] == "returned learning rate (ExponentialDecay)"


@pytest.mark.parametrize("name,correct,planted,named", PLANTED, ids=[p[0] for p in PLANTED])
def test_a_planted_bug_is_a_mismatch_named_by_what_differs(recorded, packages, name, correct, planted, named):
    if name == "schedule":
        result = _replay(recorded, packages, f"cfg_{name}", "make_scheduled")
        assert result["status"] == Status.MISMATCH
        assert result["outputs"][0]["name"].endswith(named) and "first differs at step 1:" in result["outputs"][0]["problem"]
        return
    result = _replay(recorded, packages, f"cfg_{name}", "compile_classifier")
    assert result["status"] == Status.MISMATCH, result
    failed = [c["name"] for c in result["outputs"] if not c["ok"]]
    assert named in failed[0] or any(named in f for f in failed), failed
    if "metric" not in named and "loss" not in named:  # the optimizer's bugs show in make_optimizers too
        assert _replay(recorded, packages, f"cfg_{name}", "make_optimizers")["status"] == Status.MISMATCH


def test_a_function_that_needs_more_of_its_model_than_compile_is_not_compared(recorded, packages, tmp_path):
    _translation(tmp_path, "cfg_uses_model", TRANSLATION.replace(
        "def compile_classifier(model, learning_rate=1e-2):\n",
        "def compile_classifier(model, learning_rate=1e-2):\n    model.summary()\n"))
    sys.path.insert(0, str(tmp_path))
    try:
        result = _replay(recorded, tmp_path, "cfg_uses_model", "compile_classifier")
    finally:
        sys.path.remove(str(tmp_path))
    assert result["status"] == Status.NOT_COMPARED and "stand-in" in result["note"], result


def test_a_translation_that_returns_no_optimizer_is_a_mismatch(recorded, tmp_path):
    _translation(tmp_path, "cfg_no_optimizer", TRANSLATION.replace(
        "return adam(learning_rate, b2=0.9), adam(learning_rate, b2=0.9)", "return learning_rate, learning_rate"))
    sys.path.insert(0, str(tmp_path))
    try:
        result = _replay(recorded, tmp_path, "cfg_no_optimizer", "make_optimizers")
    finally:
        sys.path.remove(str(tmp_path))
    assert result["status"] == Status.MISMATCH
    assert "not an optax transformation" in result["outputs"][0]["problem"]

