"""The translated ``compile`` / ``fit`` / ``evaluate`` / ``predict`` against Keras 3, numerically.

One Keras program (``SOURCE``) runs with TensorFlow, and tern's translation of it runs with
JAX (rules/support/KerasTrainer.py and the callbacks), from the same initial weights: the
Keras model's are ported with the trainer's ``set_weights`` (Dense and BatchNormalization
keep Keras' layout, in Keras' order), no shuffling. Compared, structure first (the same
history keys, epochs and weight shapes), then values:

* the History (loss, metrics, ``val_`` logs; a partial last batch every epoch), the final
  weights (BatchNormalization's moving statistics included), ``optimizer.iterations``,
  ``evaluate`` as a list and as a dict (a batch size that leaves a partial batch), and
  ``predict``: ``|jax - keras| <= ATOL + RTOL * |keras|`` with RTOL = 1e-5, ATOL = 1e-6
  (float32 steps differ in the last bits; measured after three epochs of Adam: 1.6e-6 on
  History values of about 1, 7e-7 on the weights, 1.4e-6 on evaluate; predict's logits, up
  to about 5, differ by up to 6.4e-6 and are compared with atol 1e-5);
* the regularized model: Keras adds ``model.losses`` to the loss, the translation the terms
  its layers sow into ``losses`` (same History, weights and evaluate);
* the batches of an epoch (order, partial last batch, ``steps_per_epoch`` resuming) against
  Keras' own EpochIterator; shuffling as a reproducible permutation per epoch;
* a test and package code sharing one model: the registry of the test file and the
  trainer stay in step (a zero-step fit leaves ``model(x)`` unchanged, a real one moves it);
* a layer's weight written in a test (``assign`` on ``model.encoder.get_layer(name).kernel``,
  on ``model.layers[i].kernel``): the model's call, ``evaluate`` and the kernels the test
  holds see it, exactly; a fit's new weights reach the same kernels;
* EarlyStopping, on a linear model whose validation loss has a known minimum (full-batch
  gradient descent on an orthogonal design): the same epochs run, the same restored
  weights and the same ``wait``/``best``/``stopped_epoch``, for patience, ``min_delta``,
  ``baseline``, ``start_from_epoch``, ``mode="max"`` on a metric and ``restore_best_weights``
  without stopping;
* ModelCheckpoint: the weights Keras keeps in ``best.weights.h5`` and those the translation
  keeps in its orbax checkpoint, read back into fresh models; the files each writes per
  epoch (``{epoch:02d}`` names); a whole-model save holding the optimizer state.

No wall-clock thresholds. The translated program is built once per module.
"""

from __future__ import annotations

import contextlib
import os
import tomllib
from pathlib import Path

import numpy as np
import pytest

import tensorflow as tf  # noqa: E402  (imported once for the session)
import keras

import jax

from compile_strings import TABLE, records, render
from tern.engine.support_module import objects
from tern.engine.translate import translate_source

RTOL = 1e-5
ATOL = 1e-6
ROOT = Path(__file__).resolve().parents[1]

SOURCE = '''
import tensorflow as tf


def build_mlp():
    return tf.keras.Sequential([
        tf.keras.Input(shape=(4,)),
        tf.keras.layers.Dense(8, activation="relu"),
        tf.keras.layers.Dense(3),
    ])


def build_bn():
    return tf.keras.Sequential([
        tf.keras.Input(shape=(4,)),
        tf.keras.layers.Dense(8),
        tf.keras.layers.BatchNormalization(),
        tf.keras.layers.Activation("relu"),
        tf.keras.layers.Dense(1),
    ])


def build_linear():
    return tf.keras.Sequential([
        tf.keras.Input(shape=(4,)),
        tf.keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros"),
    ])


def compile_classifier(model):
    model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=0.01),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy", tf.keras.metrics.SparseTopKCategoricalAccuracy(k=2, name="top2")],
                  weighted_metrics=["accuracy"])
    return model


def compile_regressor(model):
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.05, momentum=0.9), loss="mse", metrics=["mae"])
    return model


def compile_linear(model, learning_rate=0.1):
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=learning_rate), loss="mse", metrics=["mae"])
    return model


def fit(model, x, y, epochs=3, batch_size=16, validation_data=None, validation_split=0.0, sample_weight=None,
        callbacks=None):
    return model.fit(x, y, batch_size=batch_size, epochs=epochs, validation_data=validation_data,
                     validation_split=validation_split, sample_weight=sample_weight, shuffle=False,
                     callbacks=callbacks, verbose=0)


def evaluate(model, x, y, batch_size, return_dict=False):
    return model.evaluate(x, y, batch_size=batch_size, verbose=0, return_dict=return_dict)


def predict(model, x, batch_size):
    return model.predict(x, batch_size=batch_size, verbose=0)


def iterations(model):
    return model.optimizer.iterations


def stopping(name):
    if name == "patience":
        return [tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=1, restore_best_weights=True)]
    if name == "no_stop_restores":
        return [tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=10, restore_best_weights=True)]
    if name == "min_delta":
        return [tf.keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=0.5, patience=2)]
    if name == "baseline":
        return [tf.keras.callbacks.EarlyStopping(monitor="val_loss", baseline=0.001, patience=2, restore_best_weights=True)]
    if name == "start_from_epoch":
        return [tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=0, start_from_epoch=3)]
    if name == "max_metric":
        return [tf.keras.callbacks.EarlyStopping(monitor="val_mae", mode="max", patience=1)]
    return [tf.keras.callbacks.EarlyStopping(monitor="loss", patience=0, restore_best_weights=True)]


def checkpoints(directory, name):
    if name == "best_weights":
        return [tf.keras.callbacks.ModelCheckpoint(directory + "/best.weights.h5", monitor="val_loss",
                                                   save_best_only=True, save_weights_only=True)]
    if name == "every_epoch":
        return [tf.keras.callbacks.ModelCheckpoint(directory + "/w-{epoch:02d}.weights.h5", save_weights_only=True)]
    return [tf.keras.callbacks.ModelCheckpoint(directory + "/model.keras", monitor="val_mae", mode="min",
                                               save_best_only=True)]


def load(model, path):
    model.load_weights(path)
    return model


def example(x, y, directory):
    classifier = compile_classifier(build_mlp())
    fit(classifier, x, y)
    evaluate(classifier, x, y, 8)
    predict(classifier, x, 8)
    iterations(classifier)
    regressor = compile_regressor(build_bn())
    fit(regressor, x, y, callbacks=stopping("patience") + checkpoints(directory, "best_weights"))
    linear = compile_linear(build_linear())
    fit(linear, x, y)
    load(build_linear(), directory)
'''


@pytest.fixture(scope="module")
def programs():
    result = translate_source(SOURCE)
    assert not result.todos, f"the translation left TODOs:\n{result.code}"
    jax_ns: dict = objects()  # every support definition, not only those the code imports
    exec(compile(result.code, "<translation>", "exec"), jax_ns)  # noqa: S102 - tern's own output
    tf_ns: dict = {}
    exec(compile(SOURCE, "<keras>", "exec"), tf_ns)  # noqa: S102
    return tf_ns, jax_ns


def _pair(programs, build: str, seed: int = 0):
    """The Keras model and its translation, with the same weights."""
    tf_ns, jax_ns = programs
    keras.utils.set_random_seed(seed)
    km = tf_ns[build]()
    jm = jax_ns[build]()
    trainer = jax_ns["KerasTrainer"].of(jm)
    trainer.set_variables(jm.init(jax.random.key(seed), np.zeros((1, 4), "float32")))
    weights = km.get_weights()
    assert [w.shape for w in trainer.get_weights()] == [w.shape for w in weights]
    trainer.set_weights(weights)
    return km, jm


def _close(got, want, what):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=RTOL, atol=ATOL, err_msg=what)


def _same_history(got, want):
    assert sorted(got.history) == sorted(want.history)
    assert got.epoch == want.epoch
    for key, values in want.history.items():
        assert len(got.history[key]) == len(values), key
        _close(got.history[key], values, key)


def _same_weights(tf_ns, jax_ns, km, jm):
    got = jax_ns["KerasTrainer"].of(jm).get_weights()
    want = km.get_weights()
    assert [w.shape for w in got] == [w.shape for w in want]
    for i, (a, b) in enumerate(zip(got, want)):
        _close(a, b, f"weight {i}")


def _classification(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    x = (np.eye(3, 4)[labels] * 2.0 + rng.standard_normal((n, 4))).astype("float32")
    return x, labels.astype("int32")


def _regression(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 4)).astype("float32")
    return x, (x @ np.array([[1.0], [-2.0], [0.5], [1.5]]) + 0.1).astype("float32")


def test_classifier_fit_evaluate_predict_match_keras(programs):
    tf_ns, jax_ns = programs
    x, y = _classification(50, 0)  # 16, 16, 16, 2: a partial last batch every epoch
    x_val, y_val = _classification(20, 1)
    weights = np.linspace(0.5, 1.5, 50).astype("float32")
    km, jm = _pair(programs, "build_mlp")
    tf_ns["compile_classifier"](km)
    jax_ns["compile_classifier"](jm)
    want = tf_ns["fit"](km, x, y, validation_data=(x_val, y_val), sample_weight=weights)
    got = jax_ns["fit"](jm, x, y, validation_data=(x_val, y_val), sample_weight=weights)
    assert sorted(want.history) == ["accuracy", "loss", "top2", "val_accuracy", "val_loss", "val_top2",
                                    "val_weighted_accuracy", "weighted_accuracy"]
    _same_history(got, want)
    _same_weights(tf_ns, jax_ns, km, jm)
    assert int(jax_ns["iterations"](jm)) == int(tf_ns["iterations"](km)) == 3 * 4
    for batch_size in (7, 32):
        want_list, got_list = tf_ns["evaluate"](km, x_val, y_val, batch_size), jax_ns["evaluate"](jm, x_val, y_val, batch_size)
        # Keras lists loss, then each compiled metric by name (the weighted "accuracy" repeats the
        # unweighted one's value), then the remaining logs sorted: weighted_accuracy
        assert len(got_list) == len(want_list) == 5
        _close(got_list, want_list, f"evaluate(batch_size={batch_size})")
        want_dict = tf_ns["evaluate"](km, x_val, y_val, batch_size, True)
        got_dict = jax_ns["evaluate"](jm, x_val, y_val, batch_size, True)
        assert list(got_dict) == list(want_dict)
        _close(list(got_dict.values()), list(want_dict.values()), "evaluate(return_dict=True)")
    got_pred, want_pred = jax_ns["predict"](jm, x_val, 6), tf_ns["predict"](km, x_val, 6)
    assert isinstance(got_pred, np.ndarray) and got_pred.shape == want_pred.shape == (20, 3)
    np.testing.assert_allclose(got_pred, want_pred, rtol=1e-5, atol=1e-5)  # logits after training: |x| ~ 5


def test_batchnorm_regressor_with_validation_split_matches_keras(programs):
    tf_ns, jax_ns = programs
    x, y = _regression(40, 2)  # validation_split=0.25: the last 10 samples validate; 30 train in 16 + 14
    km, jm = _pair(programs, "build_bn", seed=1)
    tf_ns["compile_regressor"](km)
    jax_ns["compile_regressor"](jm)
    want = tf_ns["fit"](km, x, y, epochs=4, validation_split=0.25)
    got = jax_ns["fit"](jm, x, y, epochs=4, validation_split=0.25)
    _same_history(got, want)
    _same_weights(tf_ns, jax_ns, km, jm)  # moving mean and variance included (Keras' order)
    loss = jax_ns["evaluate"](jm, x, y, 16)
    assert isinstance(loss, list) and len(loss) == 2  # loss and mae
    _close(loss, tf_ns["evaluate"](km, x, y, 16), "evaluate")


def _orthogonal(n, seed):
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((n, 4)))
    return (np.sqrt(n) * q).astype("float32")


W_STAR = np.array([[1.0], [-2.0], [0.5], [3.0]], "float32")

# Full-batch gradient descent from zero with lr 0.1 on X^T X = N I: w_t = (1 - 0.8^t) w*; the
# validation targets x_val @ (0.6 w*) put the validation minimum at epoch 4 (1 - 0.8^4 = 0.59).
STOPPING = ["patience", "no_stop_restores", "min_delta", "baseline", "start_from_epoch", "max_metric", "loss"]


@pytest.mark.parametrize("scenario", STOPPING)
def test_early_stopping_matches_keras(programs, scenario):
    tf_ns, jax_ns = programs
    x = _orthogonal(16, 0)
    y = x @ W_STAR
    x_val = _orthogonal(8, 1)
    validation = (x_val, x_val @ (0.6 * W_STAR))
    km, jm = _pair(programs, "build_linear")
    tf_ns["compile_linear"](km)
    jax_ns["compile_linear"](jm)
    want_cb, got_cb = tf_ns["stopping"](scenario), jax_ns["stopping"](scenario)
    want = tf_ns["fit"](km, x, y, epochs=8, batch_size=16, validation_data=validation, callbacks=want_cb)
    got = jax_ns["fit"](jm, x, y, epochs=8, batch_size=16, validation_data=validation, callbacks=got_cb)
    _same_history(got, want)
    _same_weights(tf_ns, jax_ns, km, jm)
    for attribute in ("wait", "stopped_epoch", "best_epoch"):
        assert getattr(got_cb[0], attribute) == getattr(want_cb[0], attribute), attribute
    assert (got_cb[0].best is None) == (want_cb[0].best is None)
    if want_cb[0].best is not None:
        _close(got_cb[0].best, want_cb[0].best, "best")


def test_early_stopping_scenarios_are_distinct(programs):
    """Each scenario above stops at its own epoch or restores other weights (so each checks something)."""
    tf_ns, _ = programs
    x = _orthogonal(16, 0)
    x_val = _orthogonal(8, 1)
    outcomes = set()
    for scenario in STOPPING:
        keras.utils.set_random_seed(0)
        model = tf_ns["compile_linear"](tf_ns["build_linear"]())
        history = tf_ns["fit"](model, x, x @ W_STAR, epochs=8, batch_size=16,
                               validation_data=(x_val, x_val @ (0.6 * W_STAR)), callbacks=tf_ns["stopping"](scenario))
        outcomes.add((len(history.epoch), round(float(model.get_weights()[0][0, 0]), 4)))
    assert len(outcomes) >= 5, outcomes


def test_model_checkpoint_best_weights_round_trip(programs, tmp_path):
    tf_ns, jax_ns = programs
    x = _orthogonal(16, 0)
    x_val = _orthogonal(8, 1)
    validation = (x_val, x_val @ (0.6 * W_STAR))
    km, jm = _pair(programs, "build_linear")
    tf_ns["compile_linear"](km)
    jax_ns["compile_linear"](jm)
    (tmp_path / "tf").mkdir()
    (tmp_path / "jax").mkdir()
    tf_ns["fit"](km, x, x @ W_STAR, epochs=6, batch_size=16, validation_data=validation,
                 callbacks=tf_ns["checkpoints"](str(tmp_path / "tf"), "best_weights"))
    jax_ns["fit"](jm, x, x @ W_STAR, epochs=6, batch_size=16, validation_data=validation,
                  callbacks=jax_ns["checkpoints"](str(tmp_path / "jax"), "best_weights"))
    assert (tmp_path / "jax" / "best.weights.h5").is_dir()  # an orbax checkpoint under Keras' name
    assert not [p for p in (tmp_path / "jax").iterdir() if p.name.startswith(".")]  # nothing staged is left
    want = tf_ns["load"](tf_ns["build_linear"](), str(tmp_path / "tf" / "best.weights.h5")).get_weights()
    restored = jax_ns["load"](jax_ns["build_linear"](), str(tmp_path / "jax" / "best.weights.h5"))
    got = jax_ns["KerasTrainer"].of(restored).get_weights()
    _close(got[0], want[0], "best weights")
    _close(want[0], (1 - 0.8 ** 4) * W_STAR, "Keras kept epoch 4")  # the validation minimum


def test_model_checkpoint_files_per_epoch(programs, tmp_path):
    tf_ns, jax_ns = programs
    x = _orthogonal(16, 0)
    km, jm = _pair(programs, "build_linear")
    tf_ns["compile_linear"](km)
    jax_ns["compile_linear"](jm)
    for name, ns, model in (("tf", tf_ns, km), ("jax", jax_ns, jm)):
        (tmp_path / name).mkdir()
        ns["fit"](model, x, x @ W_STAR, epochs=3, batch_size=16, callbacks=ns["checkpoints"](str(tmp_path / name), "every_epoch"))
    names = sorted(p.name for p in (tmp_path / "tf").iterdir())
    assert names == ["w-01.weights.h5", "w-02.weights.h5", "w-03.weights.h5"]
    assert sorted(p.name for p in (tmp_path / "jax").iterdir()) == names
    second = jax_ns["KerasTrainer"].of(jax_ns["load"](jax_ns["build_linear"](), str(tmp_path / "jax" / names[1])))
    _close(second.get_weights()[0], (1 - 0.8 ** 2) * W_STAR, "weights after epoch 2")


def test_model_checkpoint_whole_model_keeps_the_optimizer_state(programs, tmp_path):
    _, jax_ns = programs
    x, y = _regression(32, 3)
    _, jm = _pair(programs, "build_bn")
    jax_ns["compile_regressor"](jm)
    jax_ns["fit"](jm, x, y, epochs=2, validation_data=(x, y), callbacks=jax_ns["checkpoints"](str(tmp_path), "model"))
    tree, metadata = jax_ns["keras_checkpoint_restore"](str(tmp_path / "model.keras"))
    assert set(tree) == {"variables", "opt_state", "step"}
    assert int(tree["step"]) > 0 and metadata["keras_order"]
    fresh = jax_ns["KerasTrainer"].of(jax_ns["load"](jax_ns["build_bn"](), str(tmp_path / "model.keras")))
    assert len(fresh.get_weights()) == 8  # two Dense (kernel, bias), BatchNormalization (4)


def test_metric_directions_are_keras(programs):
    """EarlyStopping/ModelCheckpoint in mode "auto" read Keras' metric._direction; the trainer's table gives the same."""
    _, jax_ns = programs
    trainer_cls = jax_ns["KerasTrainer"]
    cases = tomllib.loads((ROOT / "rules" / "api" / "cases" / "metrics.toml").read_text())["case"]
    checked = 0
    for case in cases:
        if "stream" not in case or case.get("todo"):
            continue
        prelude = case.get("prelude", "")
        keras_ns = {"keras": keras, "tf": tf, "np": np}
        exec(prelude, keras_ns)  # noqa: S102 - case code written in this repo
        want = getattr(eval(case["before"], keras_ns), "_direction", None)  # noqa: S307
        result = translate_source(f"import tensorflow as tf\nimport keras\n{prelude}\ny = {case['before']}\n")
        namespace: dict = {}
        exec(compile(result.code, "<metric>", "exec"), namespace)  # noqa: S102
        metric = namespace["y"]
        trainer = trainer_cls(None)
        trainer._metrics = [metric]
        assert trainer.metric_direction(metric.name) == want, case["before"]
        checked += 1
    assert checked >= 20


def test_compile_strings_table_is_fresh():
    assert TABLE.read_text() == render(records()), "stale: run python tests/compile_strings.py"


@pytest.mark.parametrize("shapes,expected", [
    (((6,), (6, 3)), "SparseCategoricalAccuracy"),
    (((6, 1), (6, 3)), "SparseCategoricalAccuracy"),
    (((6, 3), (6, 3)), "CategoricalAccuracy"),
    (((6, 1), (6, 1)), "BinaryAccuracy"),
])
def test_accuracy_string_is_chosen_by_shape_as_keras_does(programs, shapes, expected):
    from keras.src.trainers.compile_utils import get_metric

    _, jax_ns = programs
    rng = np.random.default_rng(4)
    y_true = rng.integers(0, 2, shapes[0]).astype("float32") if expected != "CategoricalAccuracy" \
        else np.eye(3, dtype="float32")[rng.integers(0, 3, 6)]
    y_pred = rng.random(shapes[1]).astype("float32")
    want = get_metric("accuracy", y_true, y_pred)
    assert type(want).__name__ == expected
    want.update_state(y_true, y_pred)
    got = jax_ns["KerasAutoAccuracy"](name="accuracy")
    got.update_state(y_true, y_pred)
    assert got.name == want.name == "accuracy"
    _close(got.result(), want.result(), "accuracy")


def test_a_checkpoint_replaces_the_previous_one_whole(programs, tmp_path):
    _, jax_ns = programs
    save, restore = jax_ns["keras_checkpoint_save"], jax_ns["keras_checkpoint_restore"]
    path = tmp_path / "w.weights.h5"
    save(str(path), {"variables": {"params": {"a": np.ones(3, "float32")}}}, {"keras_order": [["params", "a"]]})
    save(str(path), {"variables": {"params": {"b": np.zeros(2, "float32")}}}, {"keras_order": [["params", "b"]]})
    tree, metadata = restore(str(path))
    assert set(tree["variables"]["params"]) == {"b"} and metadata["keras_order"] == [["params", "b"]]
    assert sorted(os.listdir(tmp_path)) == ["w.weights.h5"]
    with pytest.raises(FileExistsError):
        save(str(path), {"variables": {}}, overwrite=False)


REGULARIZED = '''
import tensorflow as tf


def build():
    inputs = tf.keras.Input(shape=(4,))
    hidden = tf.keras.layers.Dense(8, activation="relu", kernel_regularizer=tf.keras.regularizers.L2(0.05),
                                   activity_regularizer=tf.keras.regularizers.L1(0.01))(inputs)
    outputs = tf.keras.layers.Dense(1, kernel_regularizer=tf.keras.regularizers.L1L2(l1=0.01, l2=0.02))(hidden)
    return tf.keras.Model(inputs, outputs)


def compile_and_fit(model, x, y):
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.05), loss="mse")
    return model.fit(x, y, batch_size=8, epochs=3, shuffle=False, validation_data=(x, y), verbose=0)


def evaluate(model, x, y):
    return model.evaluate(x, y, batch_size=16, verbose=0)


def example(x, y):
    model = build()
    compile_and_fit(model, x, y)
    evaluate(model, x, y)
'''


def test_regularization_losses_are_added_as_keras_adds_model_losses():
    """Keras adds ``model.losses`` (weight and activity penalties) to the loss in fit and
    evaluate; the translated layers sow them into ``losses`` (tern/engine/regularizers.py) and the
    trainer adds them: the same History and weights, and an evaluate loss above the MSE."""
    result = translate_source(REGULARIZED)
    assert not result.todos, f"the translation left TODOs:\n{result.code}"
    jax_ns: dict = objects()  # every support definition, not only those the code imports
    exec(compile(result.code, "<translation>", "exec"), jax_ns)  # noqa: S102
    tf_ns: dict = {}
    exec(compile(REGULARIZED, "<keras>", "exec"), tf_ns)  # noqa: S102
    x, y = _regression(20, 5)  # 8, 8, 4
    km, jm = _pair((tf_ns, jax_ns), "build", seed=2)
    _same_history(jax_ns["compile_and_fit"](jm, x, y), tf_ns["compile_and_fit"](km, x, y))
    _same_weights(tf_ns, jax_ns, km, jm)
    want, got = tf_ns["evaluate"](km, x, y), jax_ns["evaluate"](jm, x, y)
    _close(got, want, "evaluate")
    mse = float(np.mean((km.predict(x, verbose=0) - y) ** 2))
    assert want > mse + 1e-3  # the penalties are in the loss


def _batches(iterator_epochs):
    return [[(int(np.asarray(x)[0, 0]), len(x)) for x in epoch] for epoch in iterator_epochs]


@pytest.mark.parametrize("steps_per_epoch", [None, 3, 5])
@pytest.mark.parametrize("as_dataset", [False, True])
def test_epoch_batches_follow_keras_epoch_iterator(programs, steps_per_epoch, as_dataset):
    """Batch order, the partial last batch, and where an epoch of ``steps_per_epoch`` batches
    stops and the next one resumes (Keras' EpochIterator, arrays or a tf.data dataset)."""
    import warnings

    from keras.src.trainers.epoch_iterator import EpochIterator

    _, jax_ns = programs
    x = np.arange(50, dtype="float32")[:, None]
    y = np.arange(50)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16) if as_dataset else x
    target, batch_size = (None, None) if as_dataset else (y, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Your input ran out of data", on both sides
        keras_it = EpochIterator(data, target, batch_size=batch_size, steps_per_epoch=steps_per_epoch, shuffle=False)
        want = _batches([[d[0][0] for _, _, d in keras_it] for _ in range(4)])
        ours = jax_ns["KerasEpochIterator"](data, target, None, batch_size, steps_per_epoch, False)
        got = _batches([[batch[0] for _, batch in ours.epoch()] for _ in range(4)])
    assert got == want


def test_shuffling_is_a_permutation_per_epoch_and_reproducible(programs):
    _, jax_ns = programs
    x = np.arange(50, dtype="float32")[:, None]

    def epochs(shuffle, seed):
        it = jax_ns["KerasEpochIterator"](x, None, None, 16, None, shuffle, np.random.default_rng(seed))
        return [[np.asarray(b[0])[:, 0].tolist() for _, b in it.epoch()] for _ in range(3)]

    full = epochs(True, 0)
    assert full == epochs(True, 0) and full != epochs(True, 1)
    for epoch in full:
        assert [len(b) for b in epoch] == [16, 16, 16, 2]
        assert sorted(v for b in epoch for v in b) == list(range(50))
    assert full[0] != full[1]  # a new permutation each epoch
    for epoch in epochs("batch", 0):  # Keras' shuffle="batch": the batches keep their samples
        assert [sorted(b) for b in epoch] == [list(range(s, min(s + 16, 50))) for s in range(0, 50, 16)]


LIBRARY = '''
import tensorflow as tf


def build():
    return tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(2)])


def train(model, x, y, learning_rate):
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=learning_rate), loss="mse")
    return model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
'''

TEST = '''
import numpy as np
import tensorflow as tf

from tern_sync_pkg.model import build, train

X = np.linspace(-1.0, 1.0, 32, dtype="float32").reshape(8, 4)
Y = np.ones((8, 2), "float32")


def run():
    still = build()
    before = np.asarray(still(X))
    train(still, X, Y, 0.0)                 # a zero step: the fit starts from the weights still(X) used
    unchanged = np.asarray(still(X))
    moved = build()
    moved(X)
    train(moved, X, Y, 0.1)
    trained = np.asarray(moved(X))          # the call sees the weights the package's fit left
    predicted = moved.predict(X, verbose=0)
    return before, unchanged, trained, predicted, moved.get_weights(), moved.optimizer.iterations
'''


@contextlib.contextmanager
def translated_package(package: str, library: str, test: str):
    """The translated test module of a package of two modules, ``model`` and ``model_test``, imported."""
    import sys
    import types

    from tern.engine.package import PackageInfo, close_over_bases, scan_source, training_layer_names

    info = PackageInfo()
    scan_source(library, f"{package}.model", info, training_layer_names())
    scan_source(test, f"{package}.model_test", info, training_layer_names())
    close_over_bases(info)
    library = translate_source(library, package=info)
    test = translate_source(test, is_test=True, package=info)
    assert not library.todos and not test.todos, test.code
    modules = {}
    try:
        for name, code in ((package, ""), (f"{package}.model", library.code), (f"{package}.model_test", test.code)):
            module = types.ModuleType(name)  # flax dataclasses look their module up in sys.modules
            module.__path__ = []
            sys.modules[name] = modules[name] = module
            exec(compile(code, name, "exec"), module.__dict__)  # noqa: S102
        yield modules[f"{package}.model_test"], test.code
    finally:
        for name in modules:
            sys.modules.pop(name, None)


def test_a_test_and_package_code_share_one_model_state():
    """A test calls the model, a package function compiles and fits it, the test calls it again:
    one set of variables throughout, as with Keras (the file's registry and the trainer in step)."""
    with translated_package("tern_sync_pkg", LIBRARY, TEST) as (test, code):
        assert "train(_tern_shared(still), X, Y, 0.0)" in code
        before, unchanged, trained, predicted, weights, iterations = test.run()
    np.testing.assert_array_equal(unchanged, before)
    np.testing.assert_allclose(trained, predicted, rtol=1e-6, atol=1e-6)
    assert not np.allclose(trained, before)
    kernel, bias = weights  # Keras' order: kernel, then bias
    assert kernel.shape == (4, 2) and bias.shape == (2,)
    np.testing.assert_allclose(trained, X_SYNC @ kernel + bias, rtol=1e-5, atol=1e-5)
    assert int(iterations) == 2 * 2


X_SYNC = np.linspace(-1.0, 1.0, 32, dtype="float32").reshape(8, 4)


SUBMODEL_LIBRARY = '''
import tensorflow as tf
from tensorflow import keras


def make_encoder():
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(4, name="hidden")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, name="head")(hidden))


class Scaled(keras.Model):

    def __init__(self, encoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder

    def call(self, inputs):
        return 2.0 * self.encoder(inputs)
'''

SUBMODEL_TEST = '''
import numpy as np
import tensorflow as tf

from tern_submodel_pkg.model import Scaled, make_encoder

X = np.ones((4, 3), "float32")


def run():
    model = Scaled(make_encoder())
    model.compile(optimizer="sgd", loss="mse")
    head = model.encoder.get_layer("head")
    head.kernel.assign(tf.zeros_like(head.kernel))
    head.bias.assign(tf.fill(head.bias.shape, 0.5))
    head.bias.assign_add(np.full((2,), 0.25, "float32"))
    called = model(X).numpy()
    loss = model.evaluate(X, np.zeros((4, 2), "float32"), verbose=0)
    try:
        head.bias.assign(np.zeros((3,), "float32"))
    except ValueError as error:
        refused = str(error)
    return called, loss, head.bias.numpy(), refused
'''


def test_assign_on_a_sub_models_layer_writes_the_model():
    """``model.encoder.get_layer("head").kernel.assign(...)`` in a test changes the model, as in Keras: its call
    and the trainer's ``evaluate`` (which reads the file's registry) both see the new weights, exactly
    (zero kernel, bias 0.75, doubled: 1.5 everywhere, a mean squared error of 2.25 against zeros); an
    assignment of another shape raises Keras' ValueError and changes nothing."""
    with translated_package("tern_submodel_pkg", SUBMODEL_LIBRARY, SUBMODEL_TEST) as (test, code):
        assert 'head = _tern_layer(model, "head", within=("encoder",))' in code
        called, loss, bias, refused = test.run()
    np.testing.assert_array_equal(called, np.full((4, 2), 1.5, "float32"))
    np.testing.assert_allclose(loss, 1.5 ** 2, rtol=1e-6)
    np.testing.assert_array_equal(bias, [0.75, 0.75])
    assert "shape (3,)" in refused


def test_a_sequentials_layers_are_live_views_in_keras_order():
    """The golden case of ``model.layers`` (rules/testing/cases/model_layers.toml), run as translated:
    Keras indices past a layer without variables, ``assign`` seen by the kernels a test holds and by the
    model's call, and a fit's new weights seen through the same list."""
    import sys
    import types

    case = next(c for c in tomllib.loads((ROOT / "rules" / "testing" / "cases" / "model_layers.toml").read_text())["case"]
                if c["name"] == "layers_of_a_sequential_follow_keras_indices")
    code = translate_source(case["before"], is_test=True).code
    assert "tensorflow" not in code and "TODO(tern)" not in code
    module = types.ModuleType("tern_model_layers_case")  # flax dataclasses look their module up
    sys.modules[module.__name__] = module
    try:
        exec(compile(code, module.__name__, "exec"), module.__dict__)  # noqa: S102
        tests = [f for name, f in module.__dict__.items() if name.startswith("test_")]
        assert len(tests) == 3
        for run in tests:
            run()
    finally:
        del sys.modules[module.__name__]


OVERRIDES = '''
import tensorflow as tf
from tensorflow import keras


class Sampling(keras.layers.Layer):

    def call(self, inputs):
        z_mean, z_log_var = inputs
        epsilon = tf.random.normal(shape=tf.shape(z_mean))
        return z_mean + tf.exp(0.5 * z_log_var) * epsilon


class VAE(keras.Model):

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(6, activation="relu")
        self.mean = keras.layers.Dense(2)
        self.log_var = keras.layers.Dense(2, kernel_initializer="zeros", bias_initializer=keras.initializers.Constant(-30.0))
        self.sampling = Sampling()
        self.decoded = keras.layers.Dense(4, activation="sigmoid")
        self.total_loss_tracker = keras.metrics.Mean(name="total_loss")
        self.kl_loss_tracker = keras.metrics.Mean(name="kl_loss")

    @property
    def metrics(self):
        return [self.total_loss_tracker, self.kl_loss_tracker]

    def call(self, inputs):
        return self.decoded(self.mean(self.hidden(inputs)))

    def losses_of(self, data):
        h = self.hidden(data)
        z_mean, z_log_var = self.mean(h), self.log_var(h)
        reconstruction = self.decoded(self.sampling([z_mean, z_log_var]))
        rec = tf.reduce_mean(tf.reduce_sum(tf.square(data - reconstruction), axis=1))
        kl = tf.reduce_mean(tf.reduce_sum(-0.5 * (1 + z_log_var - tf.square(z_mean) - tf.exp(z_log_var)), axis=1))
        return rec + kl, kl

    def train_step(self, data):
        with tf.GradientTape() as tape:
            total_loss, kl_loss = self.losses_of(data)
        grads = tape.gradient(total_loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        self.total_loss_tracker.update_state(total_loss)
        self.kl_loss_tracker.update_state(kl_loss)
        return {m.name: m.result() for m in self.metrics}

    def test_step(self, data):
        total_loss, kl_loss = self.losses_of(data)
        self.total_loss_tracker.update_state(total_loss)
        self.kl_loss_tracker.update_state(kl_loss)
        return {m.name: m.result() for m in self.metrics}


def compile_vae(model):
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01))
    return model


def fit(model, x, x_val):
    return model.fit(x, epochs=3, batch_size=8, shuffle=False, validation_data=(x_val,), verbose=0)


def evaluate(model, x, batch_size, return_dict=False):
    return model.evaluate(x, batch_size=batch_size, verbose=0, return_dict=return_dict)


def tracked(model):
    return [(m.name, float(m.result())) for m in model.metrics]


def example(x):
    model = compile_vae(VAE())
    fit(model, x, x)
    evaluate(model, x, 8)
    tracked(model)
'''


def test_train_step_and_test_step_overrides_match_keras():
    """A VAE whose fit/evaluate run its own ``train_step``/``test_step`` with two trackers
    (rules/structure/keras_step_override.py): the same History (trackers reset every epoch,
    ``val_`` logs from ``test_step``), weights, iterations, evaluate (list and dict, a partial
    batch) and tracker state afterwards. The posterior log-variance starts at -30 (zero
    kernel), so the sample is the mean up to exp(-15) ~ 3e-7 and the two RNGs do not matter
    within tolerance; the sampling still runs, on the trainer's noise key."""
    result = translate_source(OVERRIDES)
    assert not result.todos, f"the translation left TODOs:\n{result.code}"
    jax_ns: dict = objects()  # every support definition, not only those the code imports
    exec(compile(result.code, "<translation>", "exec"), jax_ns)  # noqa: S102
    tf_ns: dict = {}
    exec(compile(OVERRIDES, "<keras>", "exec"), tf_ns)  # noqa: S102
    rng = np.random.default_rng(7)
    # batches of 8, 8, 4 (training) and 8, 4 (validation): one partial batch each, and no other
    # shapes, so each step compiles twice
    x, x_val = rng.random((20, 4)).astype("float32"), rng.random((12, 4)).astype("float32")
    keras.utils.set_random_seed(3)
    km, jm = tf_ns["VAE"](), jax_ns["VAE"]()
    km.losses_of(x[:1])  # builds every layer, in creation order
    trainer = jax_ns["KerasTrainer"].of(jm)
    key = jax.random.key(0)
    trainer.set_variables(jm.init({"params": key, "noise": key}, x[:1], method="losses_of"))  # eager: keeps the order
    trainer.set_weights(km.get_weights())
    assert [m.name for m in jm.metrics] == [m.name for m in km.metrics] == ["total_loss", "kl_loss"]
    tf_ns["compile_vae"](km)
    jax_ns["compile_vae"](jm)
    want, got = tf_ns["fit"](km, x, x_val), jax_ns["fit"](jm, x, x_val)
    assert sorted(want.history) == ["kl_loss", "total_loss", "val_kl_loss", "val_total_loss"]
    _same_history(got, want)
    _same_weights(tf_ns, jax_ns, km, jm)
    assert trainer.iterations == int(km.optimizer.iterations) == 3 * 3
    # after fit the trackers hold the last validation's means (Keras' evaluate reset them)
    assert [n for n, _ in jax_ns["tracked"](jm)] == [n for n, _ in tf_ns["tracked"](km)]
    _close([v for _, v in jax_ns["tracked"](jm)], [v for _, v in tf_ns["tracked"](km)], "trackers after fit")
    _close([v for _, v in tf_ns["tracked"](km)], [want.history["val_total_loss"][-1], want.history["val_kl_loss"][-1]],
           "Keras' trackers after fit")
    # evaluate: the trackers' means over the batches (each batch's mean counts once, the partial one too)
    want_list, got_list = tf_ns["evaluate"](km, x, 8), jax_ns["evaluate"](jm, x, 8)
    assert len(got_list) == len(want_list) == 2
    _close(got_list, want_list, "evaluate")
    want_dict, got_dict = tf_ns["evaluate"](km, x_val, 8, True), jax_ns["evaluate"](jm, x_val, 8, True)
    assert list(got_dict) == list(want_dict) == ["kl_loss", "total_loss"]
    _close(list(got_dict.values()), list(want_dict.values()), "evaluate(return_dict=True)")
