"""Metric records (rules/api/metrics.toml) against Keras 3, batch by batch.

Every translating case of ``rules/api/cases/metrics.toml`` with a ``stream`` is run both
ways: ``y = <before>`` is built with Keras (``prelude`` run first); the translation tern
produces for ``prelude`` + ``y = <before>`` is executed (support code and imports included)
and its ``y`` is the translated metric object. Both get the same stream of batches (Keras
NumPy arrays, the translation JAX arrays, as a training loop gets them back from a jitted
step). ``result()`` is compared after every ``update_state``, after ``reset_state()``, and
after one more update made by calling the object (``m(y_true, y_pred)``, Keras'
update-and-result). Structure first (shape), then ``|jax - keras| <= ATOL + RTOL * |keras|``.

The streams hold what tells metric semantics apart: predictions exactly at the thresholds
(0, 0.25, 0.5, 0.75, 1, multiples of 0.05, of 1/199) and outside [0, 1], ties, all-positive
and all-negative batches, a batch of zero weights, labels of another rank than the
predictions, sample weights of shape (), (n,), (n, 1) and (n, k), float and integer labels,
-0.0 against 0.0. RTOL = 1e-6 / ATOL = 1e-6: float32 sums taken in another order (NumPy's
pairwise sums vs TensorFlow's) differ by a few ulps; every semantic difference checked in
``test_wrong_semantics_differ`` is larger than 1e-3.

``test_wrong_semantics_differ`` runs plausible but wrong translations the same way (plain
``jax.lax.top_k``, ``jnp.argmax``, ``>=`` thresholds, one threshold less, Keras' bucketing
path skipped, a count of samples instead of weights): each must FAIL the comparison, so the
streams and tolerances can tell those semantics apart.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

import keras

import jax.numpy as jnp

from tern.engine.records import load_tables
from translated_objects import keras_object, translated_object

RULES = Path(__file__).resolve().parents[1] / "rules"
CASES_FILE = RULES / "api" / "cases" / "metrics.toml"
RTOL = 1e-6
ATOL = 1e-6


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "little"))


def _cases() -> list[dict]:
    data = tomllib.loads(CASES_FILE.read_text(encoding="utf-8"))
    return [c for c in data["case"] if c.get("stream") and not c.get("todo")]


CASES = _cases()

# -- streams: lists of (args, kwargs) for update_state -----------------------------------

EDGES = np.array([0.0, 0.25, 0.5, 0.75, 1.0, 0.05, 0.3, 0.7, 0.9, 0.95, 100 / 199, 1 / 199, 198 / 199, 0.5, 0.0, 1.0], np.float32)


def _binary_predictions(rng, shape) -> np.ndarray:
    p = rng.uniform(0, 1, size=shape).astype(np.float32)
    mask = rng.random(shape) < 0.4
    return np.where(mask, rng.choice(EDGES, size=shape), p).astype(np.float32)


def _labels01(rng, shape) -> np.ndarray:
    return (rng.random(shape) < 0.5).astype(np.float32)


def _call(*args, sample_weight=None):
    return args, ({} if sample_weight is None else {"sample_weight": sample_weight})


def stream_values(rng):
    n = rng.standard_normal
    return [
        _call(n(8).astype(np.float32)),
        _call(n(8).astype(np.float32), sample_weight=rng.uniform(0, 2, 8).astype(np.float32)),
        _call(n((4, 3)).astype(np.float32)),
        _call(n((4, 3)).astype(np.float32), sample_weight=rng.uniform(0, 2, 4).astype(np.float32)),
        _call(n((4, 3)).astype(np.float32), sample_weight=rng.uniform(0, 2, (4, 1)).astype(np.float32)),
        _call(n((4, 3)).astype(np.float32), sample_weight=rng.uniform(0, 2, (4, 3)).astype(np.float32)),
        _call(np.float32(2.5)),
        _call(np.float32(-1.5), sample_weight=np.float32(3.0)),
        _call(n(5).astype(np.float32), sample_weight=np.zeros(5, np.float32)),
        _call(n((2, 3, 2)).astype(np.float32), sample_weight=rng.uniform(0, 1, (2, 3)).astype(np.float32)),
        _call(np.array([1, 2, 3], np.int32)),
    ]


def stream_binary(rng):
    p = lambda shape: _binary_predictions(rng, shape)  # noqa: E731
    edges = EDGES.reshape(-1, 1)
    return [
        _call(_labels01(rng, (16, 1)), p((16, 1))),
        _call(_labels01(rng, 16), p((16, 1)), sample_weight=rng.uniform(0, 2, 16).astype(np.float32)),
        _call(_labels01(rng, (len(EDGES), 1)), edges),
        _call(np.ones((16, 1), np.float32), p((16, 1)), sample_weight=rng.uniform(0, 2, (16, 1)).astype(np.float32)),
        _call(np.zeros((16, 1), np.float32), p((16, 1))),
        _call(_labels01(rng, (16, 1)), np.full((16, 1), 0.5, np.float32)),
        _call(_labels01(rng, (16, 3)), p((16, 3)), sample_weight=rng.uniform(0, 2, 16).astype(np.float32)),
        _call((rng.random(16) < 0.5).astype(np.int32), p(16)),
        _call(_labels01(rng, (16, 1)), np.tile([[1.2], [-0.1], [1.0], [0.0], [2.0], [-3.0], [0.5], [0.25]], (2, 1)).astype(np.float32)),
        _call(_labels01(rng, (16, 1)), p((16, 1)), sample_weight=np.zeros(16, np.float32)),
    ]


def stream_binary_same_rank(rng):
    return [(args, kwargs) for args, kwargs in stream_binary(rng) if np.ndim(args[0]) == np.ndim(args[1])]


def stream_logits(rng):
    n = lambda shape: (rng.standard_normal(shape) * 3).astype(np.float32)  # noqa: E731
    return [
        _call(_labels01(rng, (16, 1)), n((16, 1))),
        _call(_labels01(rng, (16, 1)), n((16, 1)), sample_weight=rng.uniform(0, 2, 16).astype(np.float32)),
        _call(_labels01(rng, (16, 3)), np.array([[0.0, -0.0, 1.0]] * 16, np.float32) * n((16, 1))),
        _call(np.ones((16, 1), np.float32), n((16, 1))),
        _call(_labels01(rng, (16, 1)), np.zeros((16, 1), np.float32)),
    ]


def stream_multilabel(rng):
    p = lambda shape: _binary_predictions(rng, shape)  # noqa: E731
    ties = np.array([[0.5, 0.5, 0.2, 0.5], [0.1, 0.9, 0.9, 0.0], [0.3, 0.3, 0.3, 0.3], [0.0, 1.0, 0.5, 0.5]] * 2, np.float32)
    return [
        _call(_labels01(rng, (8, 4)), p((8, 4))),
        _call(_labels01(rng, (8, 4)), p((8, 4)), sample_weight=rng.uniform(0, 2, 8).astype(np.float32)),
        _call(_labels01(rng, (8, 4)), ties),
        _call(np.ones((8, 4), np.float32), p((8, 4))),
        _call(_labels01(rng, (8, 4)), p((8, 4)), sample_weight=rng.uniform(0, 2, (8, 1)).astype(np.float32)),
    ]


def _probabilities(rng, n, classes=5):
    p = rng.dirichlet(np.ones(classes), n).astype(np.float32)
    p[0, :2] = p[0, :2].mean()  # a tie for the top
    p[1] = [0.3, 0.3, 0.3, 0.1, 0.0]  # a three-way tie
    return p


def stream_categorical(rng):
    onehot = lambda n: np.eye(5, dtype=np.float32)[rng.integers(0, 5, n)]  # noqa: E731
    signed = np.array([[-0.0, 0.0, -1.0, -2.0, -3.0], [0.0, -0.0, -1.0, -2.0, -3.0]] * 4, np.float32)
    ties = np.array([[0.3, 0.3, 0.3, 0.1, 0.0], [0.1, 0.4, 0.4, 0.1, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2], [0.0, 0.0, 0.5, 0.5, 0.0]] * 2, np.float32)
    return [
        _call(onehot(8), _probabilities(rng, 8)),
        _call(onehot(8), _probabilities(rng, 8), sample_weight=rng.uniform(0, 2, 8).astype(np.float32)),
        _call(np.eye(5, dtype=np.float32)[[1] * 8], signed),
        _call(np.eye(5, dtype=np.float32)[[2, 2, 3, 3, 1, 0, 4, 2]], ties),
        _call(onehot(8), _probabilities(rng, 8), sample_weight=rng.uniform(0, 2, (8, 1)).astype(np.float32)),
    ]


def stream_sparse(rng):
    return [
        _call(rng.integers(0, 5, 8).astype(np.int32), _probabilities(rng, 8)),
        _call(rng.integers(0, 5, (8, 1)).astype(np.int32), _probabilities(rng, 8),
              sample_weight=rng.uniform(0, 2, 8).astype(np.float32)),
        _call(np.ones(8, np.int32), np.array([[-0.0, 0.0, -1.0, -2.0, -3.0]] * 8, np.float32)),
        _call(np.array([2, 2, 3, 3, 1, 0, 4, 2], np.int32), np.array(
            [[0.3, 0.3, 0.3, 0.1, 0.0], [0.1, 0.4, 0.4, 0.1, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2], [0.0, 0.0, 0.5, 0.5, 0.0]] * 2,
            np.float32)),
        _call(rng.integers(0, 5, 8).astype(np.float32), _probabilities(rng, 8)),
    ]


def stream_sorted_ids(rng):
    ids = np.stack([rng.permutation(5) for _ in range(8)]).astype(np.int32)
    return [
        _call(rng.integers(0, 5, 8).astype(np.int32), ids),
        _call(rng.integers(0, 5, (8, 1)).astype(np.int32), ids, sample_weight=rng.uniform(0, 2, 8).astype(np.float32)),
    ]


def stream_regression(rng):
    n = rng.standard_normal
    return [
        _call(n((8, 3)).astype(np.float32), n((8, 3)).astype(np.float32)),
        _call(n((8, 3)).astype(np.float32), n((8, 3)).astype(np.float32), sample_weight=rng.uniform(0, 2, 8).astype(np.float32)),
        _call(n(8).astype(np.float32), n((8, 1)).astype(np.float32)),
        _call(n((8, 1)).astype(np.float32), n((8, 1)).astype(np.float32), sample_weight=rng.uniform(0, 2, (8, 1)).astype(np.float32)),
        _call(np.zeros((8, 3), np.float32), np.zeros((8, 3), np.float32)),
    ]


def stream_positive(rng):
    u = lambda shape: rng.uniform(0, 3, shape).astype(np.float32)  # noqa: E731
    return [
        _call(u((8, 3)), u((8, 3))),
        _call(u((8, 3)), u((8, 3)), sample_weight=rng.uniform(0, 2, 8).astype(np.float32)),
        _call(u(8), u((8, 1))),
        _call(np.zeros((8, 3), np.float32), u((8, 3))),
    ]


def stream_exact(rng):
    return [
        _call(rng.integers(0, 3, (8, 1)).astype(np.float32), rng.integers(0, 3, (8, 1)).astype(np.float32)),
        _call(rng.integers(0, 3, 8).astype(np.int32), rng.integers(0, 3, (8, 1)).astype(np.float32),
              sample_weight=rng.uniform(0, 2, 8).astype(np.float32)),
        _call(np.array([[1.0, 2.0], [3.0, 4.0]] * 4, np.float32), np.array([[1.0, 2.5], [3.0, 4.0]] * 4, np.float32)),
    ]


STREAMS = {name[len("stream_"):]: fn for name, fn in globals().items() if name.startswith("stream_")}


# -- running both sides ------------------------------------------------------------------


def _as_jax(value):
    return jnp.asarray(value) if isinstance(value, np.ndarray) else value


def results(metric, stream, *, convert=lambda v: v) -> list[np.ndarray]:
    """``result()`` after each update, after ``reset_state()``, and after ``metric(*first)``."""
    out = []
    for args, kwargs in stream:
        metric.update_state(*map(convert, args), **{k: convert(v) for k, v in kwargs.items()})
        out.append(np.asarray(metric.result()))
    metric.reset_state()
    out.append(np.asarray(metric.result()))
    args, kwargs = stream[0]
    out.append(np.asarray(metric(*map(convert, args), **{k: convert(v) for k, v in kwargs.items()})))
    return out


def compare(keras_results, jax_results) -> None:
    assert len(keras_results) == len(jax_results)
    for i, (k, j) in enumerate(zip(keras_results, jax_results)):
        assert k.shape == j.shape, f"result {i}: shape {k.shape} vs {j.shape}"
        np.testing.assert_allclose(j, k, rtol=RTOL, atol=ATOL, err_msg=f"result {i} differs")


def _auto(name: str) -> str:
    return re.sub(r"_\d+$", "", name)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_metric_matches_keras(case: dict):
    prelude = case.get("prelude", "")
    stream = STREAMS[case["stream"]](_rng(case["id"]))
    k_metric = keras_object(case["before"], prelude)
    j_metric = translated_object(case["before"], prelude)
    assert _auto(j_metric.name) == _auto(k_metric.name)
    compare(results(k_metric, stream), results(j_metric, stream, convert=_as_jax))


# -- the comparison tells these semantics apart ------------------------------------------

# (id, Keras metric, a plausible but wrong translation (code over the support namespace), stream)
WRONG = [
    ("top_k_by_index", "keras.metrics.TopKCategoricalAccuracy(k=2)",
     "KerasMeanMetricWrapper(lambda t, p: jnp.any(jax.lax.top_k(p, 2)[1] == jnp.argmax(t, -1)[:, None], -1).astype(jnp.float32))",
     "categorical"),
    ("argmax_negative_zero", "keras.metrics.SparseCategoricalAccuracy()",
     "KerasMeanMetricWrapper(lambda t, p: (jnp.asarray(t).reshape(-1) == jnp.argmax(p, -1)).astype(jnp.float32))",
     "sparse"),
    ("binary_accuracy_greater_equal", "keras.metrics.BinaryAccuracy()",
     "KerasMeanMetricWrapper(lambda t, p: keras_binary_accuracy(t, p, threshold=np.nextafter(np.float32(0.5), np.float32(0))))",
     "binary"),
    ("auc_one_threshold_less", "keras.metrics.AUC()", "KerasAUC(num_thresholds=199)", "binary"),
    ("precision_without_bucketing", "keras.metrics.Precision(thresholds=[0.0, 0.5, 1.0])",
     "_general_path(KerasPrecision(thresholds=[0.0, 0.5, 1.0]))", "binary"),
    ("mean_counts_samples_not_weights", "keras.metrics.Mean()",
     "_count_samples(KerasMean())", "values"),
]


def _general_path(metric):
    metric._evenly = False
    return metric


def _count_samples(metric):
    update = metric.update_state
    metric.update_state = lambda values, sample_weight=None: update(
        values, None if sample_weight is None else (np.asarray(sample_weight) != 0).astype(np.float32)
    )
    return metric


def _support_namespace() -> dict:
    import jax

    from tern.engine.support_module import objects

    namespace: dict = {"np": np, "jnp": jnp, "jax": jax, "_general_path": _general_path, "_count_samples": _count_samples}
    return {**namespace, **objects()}


@pytest.mark.parametrize("name, keras_code, wrong_code, stream", WRONG, ids=[w[0] for w in WRONG])
def test_wrong_semantics_differ(name, keras_code, wrong_code, stream):
    batches = STREAMS[stream](_rng(name))
    keras_results = results(keras_object(keras_code), batches)
    wrong_results = results(eval(wrong_code, _support_namespace()), batches, convert=_as_jax)  # noqa: S307
    with pytest.raises(AssertionError):
        compare(keras_results, wrong_results)


# -- table checks specific to metrics ----------------------------------------------------

TABLES = load_tables(RULES)
METRIC_RECORDS = sorted(
    {id(r): r for r in TABLES.api.values() if r.origin.startswith("api/metrics")}.values(), key=lambda r: r.source
)


def test_every_metric_class_is_run_against_keras():
    run = set()
    for case in CASES:
        run.add(keras_object(case["before"], case.get("prelude", "")).__class__.__name__)
    classes = {r.source.rsplit(".", 1)[1] for r in METRIC_RECORDS if r.source.rsplit(".", 1)[1][0].isupper()}
    assert classes <= run, f"no stream case for {sorted(classes - run)}"


@pytest.mark.parametrize("record", METRIC_RECORDS, ids=[r.source for r in METRIC_RECORDS])
def test_default_name_is_keras(record):
    """A record that writes the name out writes Keras' default name."""
    default = record.signature.defaults.get("name")
    if default is None:
        return
    obj = getattr(keras.metrics, record.source.rsplit(".", 1)[1])
    assert eval(default) == inspect.signature(obj).parameters["name"].default  # noqa: S307


def test_support_classes_have_the_keras_api():
    namespace = _support_namespace()
    for path in sorted((RULES / "support").glob("Keras*.py")):
        cls = namespace[path.stem]
        if not any(r.template and f"{{support:{path.stem}}}" in str(r.template) for r in METRIC_RECORDS):
            continue
        for method in ("update_state", "result", "reset_state", "reset_states", "__call__"):
            assert callable(getattr(cls, method, None)), f"{path.stem} has no {method}"


def test_support_modules_import_on_their_own():
    """Each support module the metric records name imports alone, in a fresh interpreter
    (its imports name everything it uses)."""
    import subprocess
    import sys

    from tern.engine.support_module import closure, definitions

    used = {n for r in METRIC_RECORDS for n in re.findall(r"\{support:(\w+)\}", str(r.template))}
    files = sorted({definitions()[name].file for name in closure(used)})
    code = "import importlib\n" + "".join(f"importlib.import_module('tern_rules.support.{f}')\n" for f in files)
    subprocess.run([sys.executable, "-c", code], check=True)


# the per-sample functions of the metric records, with the keyword arguments records can pass
PER_SAMPLE = [
    ("keras_accuracy", {}, "exact"),
    ("keras_binary_accuracy", {"threshold": 0.75}, "binary"),
    ("keras_categorical_accuracy", {}, "categorical"),
    ("keras_sparse_categorical_accuracy", {}, "sparse"),
    ("keras_top_k_categorical_accuracy", {"k": 2}, "categorical"),
    ("keras_sparse_top_k_categorical_accuracy", {"k": 2}, "sparse"),
    ("keras_sparse_top_k_categorical_accuracy", {"k": 3, "from_sorted_ids": True}, "sorted_ids"),
]


@pytest.mark.parametrize("name, kwargs, stream", PER_SAMPLE, ids=[f"{p[0]}-{i}" for i, p in enumerate(PER_SAMPLE)])
def test_per_sample_functions_run_under_jit(name, kwargs, stream):
    """The accuracy functions may be called inside a jitted step (hyperparameters bound)."""
    import functools

    import jax

    fn = functools.partial(_support_namespace()[name], **kwargs)
    for args, _ in STREAMS[stream](_rng(name)):
        args = [jnp.asarray(a) for a in args]
        np.testing.assert_array_equal(np.asarray(jax.jit(fn)(*args)), np.asarray(fn(*args)))


def test_metric_state_refuses_traced_values():
    """Metric objects hold state outside jit: updating one inside jax.jit fails loudly."""
    import jax

    metric = _support_namespace()["KerasMean"]()

    @jax.jit
    def step(x):
        metric.update_state(x)
        return x

    with pytest.raises(jax.errors.TracerArrayConversionError):
        step(jnp.ones(3))
    assert float(metric.result()) == 0.0
    metric.update_state([1.0, 2.0])
    metric.reset_states()  # tf.keras 2's spelling
    assert float(metric.result()) == 0.0
