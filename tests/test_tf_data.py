"""tf.data is allowed TF use: kept as written, bridged to NumPy, reported, verified.

The allowance (``rules/allowed/tf_data.toml``) against the installed tf.data; the bridge
(``rules/support/as_numpy_batches.py``) on datasets and on what else a loop may be given;
the reading of kept TF (``tern/features/tf_data/kept.py``) behind the report, the evaluation's "TensorFlow
left" and the verifier's worker kind; and ``tern migrate`` / ``tern verify`` on a small
package with a tf.data pipeline, a jitted step and tests that build their own dataset.
Rewrites themselves are golden cases in ``rules/structure/cases/tf_data.toml``.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from tern.evaluation import scan
from tern.evaluation.score import Translation
from tern.features.tf_data.kept import read, read_tree, tree_keeps_only_allowed_tf
from tern.engine.records import tables
from tern.engine.report import FileResult, RunReport
from tern.verify.run import PackageVerifier

ROOT = Path(__file__).resolve().parents[1]
RECORD = tables().allowance("tensorflow.data")

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")
jax = pytest.importorskip("jax")

sys.path.insert(0, str(ROOT / "rules" / "support"))
from as_numpy_batches import as_numpy_batches  # noqa: E402

sys.path.remove(str(ROOT / "rules" / "support"))


# ------------------------------------------------------------------ the table, live


def test_dataset_methods_are_the_live_ones_that_return_a_dataset():
    live = {
        name for name, member in vars(tf.data.Dataset).items()
        if not name.startswith("_") and inspect.isfunction(member)
        and inspect.signature(member).return_annotation == "DatasetV2"
        and next(iter(inspect.signature(member).parameters), "") == "self"
    }
    assert set(RECORD.methods) == live


def test_graph_methods_name_the_live_parameters_that_take_functions():
    for method, params in RECORD.graph_methods.items():
        live = list(inspect.signature(getattr(tf.data.Dataset, method)).parameters)[1:]
        assert live[: len(params)] == list(params), method
        assert RECORD.graph_params(method), f"{method}: no parameter takes a function"


@pytest.mark.parametrize("name", [
    "tensorflow.data.Dataset.from_tensor_slices", "tensorflow.data.Dataset.range", "tensorflow.data.TFRecordDataset",
    "tensorflow.data.TextLineDataset", "tensorflow.data.experimental.CsvDataset", "tensorflow.data.experimental.make_csv_dataset",
])
def test_constructors_make_datasets(name):
    assert RECORD.makes_dataset(name)
    obj = tf
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)


@pytest.mark.parametrize("name", ["tensorflow.data.Options", "tensorflow.data.AUTOTUNE", "tensorflow.data.experimental.cardinality"])
def test_other_tf_data_symbols_are_allowed_but_make_no_dataset(name):
    assert tables().allowance(name) is RECORD and not RECORD.makes_dataset(name)


@pytest.mark.parametrize("name", ["tensorflow.dataset", "keras.utils.image_dataset_from_directory", "tensorflow.reduce_sum"])
def test_near_misses_are_not_allowed(name):
    assert tables().allowance(name) is None


def test_graph_functions_may_keep_tf_ops_but_never_keras():
    assert RECORD.allowed_in_graph("tensorflow.cast") and RECORD.allowed_in_graph("tensorflow.data.AUTOTUNE")
    for name in ("keras.layers.RandomFlip", "tensorflow.keras.ops.add", "tf_keras.layers.Dense"):
        assert not RECORD.allowed_in_graph(name), name


# ------------------------------------------------------------------ the bridge


def test_bridge_yields_what_iterating_the_dataset_yields_as_numpy():
    """Epoch by epoch (a reshuffling dataset too): the same elements, structure kept, as NumPy."""
    x = np.arange(12, dtype="float32").reshape(6, 2)
    y = np.arange(6, dtype="int32")

    def dataset():
        return tf.data.Dataset.from_tensor_slices((x, {"label": y})).shuffle(6, seed=0).batch(4)

    eager, bridged = dataset(), dataset()
    for _ in range(2):  # every epoch, not a one-shot iterator
        want = [(a.numpy(), {"label": b["label"].numpy()}) for a, b in eager]
        got = list(as_numpy_batches(bridged))
        assert len(got) == len(want) == 2
        for (a, b), (wa, wb) in zip(got, want):
            assert isinstance(a, np.ndarray) and isinstance(b["label"], np.ndarray)
            np.testing.assert_array_equal(a, wa)
            np.testing.assert_array_equal(b["label"], wb["label"])


def test_jit_refuses_eager_tensors_and_takes_bridged_batches():
    step = jax.jit(lambda a: (a * 2).sum())
    dataset = tf.data.Dataset.from_tensor_slices(np.ones((4, 3), "float32")).batch(2)
    with pytest.raises(TypeError):
        step(next(iter(dataset)))
    assert [float(step(b)) for b in as_numpy_batches(dataset)] == [12.0, 12.0]


@pytest.mark.parametrize("value", [
    [np.ones(2), np.zeros(2)], (np.ones(3),), {"a": 1}, range(3), "text",
], ids=["list", "tuple", "dict", "range", "str"])
def test_bridge_leaves_other_iterables_as_they_are(value):
    assert as_numpy_batches(value) is value


def test_bridge_leaves_a_generator_and_a_dataset_of_datasets_as_they_are():
    generator = (i for i in range(3))
    assert as_numpy_batches(generator) is generator
    windows = tf.data.Dataset.range(4).window(2)  # as_numpy_iterator() refuses nested datasets
    assert as_numpy_batches(windows) is windows
    assert [list(w.as_numpy_iterator()) for w in as_numpy_batches(windows)] == [[0, 1], [2, 3]]


# ------------------------------------------------------------------ reading kept TF

PIPELINE = '''
import tensorflow as tf


def make_dataset(x):
    return tf.data.Dataset.from_tensor_slices(x).map(lambda v: tf.cast(v, tf.float32)).batch(2)
'''


def test_a_file_whose_only_tf_is_tf_data_keeps_only_allowed_tf():
    kept = read(PIPELINE)
    assert kept.only_allowed and not kept.other
    assert [(u.construct, u.line) for u in kept.allowed] == [
        ("tf.data.Dataset.from_tensor_slices", 6), ("tf.cast", 6), ("tf.float32", 6)]


@pytest.mark.parametrize("extra, left", [
    ("\n\ndef total(x):\n    return tf.reduce_sum(x)\n", "tf.reduce_sum"),
    ("\n\nimport jax\n\n\n@jax.jit\ndef n():\n    return tf.data.Dataset.range(3)\n", "tf.data.Dataset.range"),
    ("\n\ndef model():\n    return tf.keras.Sequential([])\n", "keras.Sequential"),
], ids=["other-tf", "tf-data-under-jit", "keras"])
def test_anything_else_is_tf_left(extra, left):
    kept = read(PIPELINE + extra)
    assert not kept.only_allowed and left in [c for _, c in kept.other]


def test_evaluation_counts_a_tf_data_only_translation_as_complete(tmp_path):
    (tmp_path / "data.py").write_text(PIPELINE)
    (tmp_path / "model.py").write_text("import jax.numpy as jnp\n\n\ndef f(x):\n    return jnp.sum(x)\n")
    assert scan.tensorflow_left(tmp_path) == []
    assert Translation(residue=0, tf_left=scan.tensorflow_left(tmp_path)).complete
    (tmp_path / "model.py").write_text("import keras\n\n\ndef f(x):\n    return keras.ops.sum(x)\n")
    assert scan.tensorflow_left(tmp_path) == ["model.py:1: import keras"]
    assert not Translation(residue=0, tf_left=scan.tensorflow_left(tmp_path)).complete


def test_the_verifier_pays_for_tensorflow_only_when_tf_data_needs_it(tmp_path):
    def kind(files):
        root = tmp_path / str(len(list(tmp_path.iterdir())))
        root.mkdir()
        for name, text in files.items():
            (root / name).write_text(text)
        return PackageVerifier(root, root, runner=None, cache=None, config=None).jax_kind

    jax_only = "import jax.numpy as jnp\n"
    assert kind({"a.py": jax_only}) == "jax"
    assert kind({"a.py": jax_only, "data.py": PIPELINE}) == "jax_tfdata"
    assert kind({"a.py": "import tensorflow as tf\nx = tf.ones(1)\n", "data.py": PIPELINE}) == "jax"
    assert kind({"a.py": "import keras\n", "data.py": PIPELINE}) == "jax"
    assert tree_keeps_only_allowed_tf(tmp_path / "1")


def test_a_tree_no_import_statement_of_which_names_tf_is_answered_without_reading_it(tmp_path):
    """``tree_keeps_only_allowed_tf`` skips reading a tree whose text has no import of TF: the
    answer is the full reading's on every fixture tree and on imports spelled unusually."""
    def full(root: Path) -> bool:
        importing = [k for k in read_tree(root).values() if k.imports_tf]
        return bool(importing) and all(k.only_allowed for k in importing)

    trees = [p for base in ("expected", "tf", "wrong") for p in sorted((ROOT / "fixtures" / base).iterdir()) if p.is_dir()]
    assert len(trees) > 60
    for root in trees:
        assert tree_keeps_only_allowed_tf(root) == full(root), root
    hidden = {"guarded": "if True: import tensorflow as tf\n", "continued": "import os, \\\n    tensorflow as tf\n",
              "folded": "import ｔｅｎｓｏｒｆｌｏｗ as tf\n"}  # NFKC: tensorflow
    for name, imports in hidden.items():
        root = tmp_path / name
        root.mkdir()
        (root / "data.py").write_text(imports + PIPELINE.replace("import tensorflow as tf\n", ""))
        assert tree_keeps_only_allowed_tf(root) and full(root), name


def test_report_lists_allowed_tf_apart_from_residue():
    kept = read(PIPELINE)
    report = RunReport("src", "out", [FileResult("data.py", "translated", allowed=list(kept.allowed))])
    assert report.exit_code == 0 and report.totals()["todos"] == 0 and report.totals()["allowed_tf"] == 3
    markdown = report.to_markdown()
    assert "## Allowed TF use" in markdown and "| `data.py:6` | `tf.data.Dataset.from_tensor_slices` |" in markdown
    assert "What still needs a human" not in markdown
    assert json.loads(report.to_json())["files"][0]["allowed"][0]["construct"] == "tf.data.Dataset.from_tensor_slices"


# ------------------------------------------------------------------ tern migrate / tern verify

PKG = {
    "__init__.py": "",
    "data.py": '''"""The input pipeline."""

import tensorflow as tf


def make_dataset(x, y, batch_size=4):
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0)
    dataset = dataset.map(lambda a, b: (tf.cast(a, tf.float32) * 2.0, b), num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)
''',
    "train.py": '''"""A jitted step and the loop over a dataset."""

import tensorflow as tf


@tf.function
def step(w, x, y):
    return tf.reduce_mean(tf.square(tf.linalg.matvec(x, w) - y))


def total_loss(w, dataset):
    return sum(float(step(w, x, y)) for x, y in dataset)
''',
    "train_test.py": '''import numpy as np
import tensorflow as tf

from pipe.data import make_dataset
from pipe.train import step, total_loss

X = np.arange(24, dtype="float32").reshape(8, 3) / 10
Y = np.arange(8, dtype="float32") / 4
W = np.array([0.5, -1.0, 0.25], "float32")


def expected(x):
    return np.mean((x @ W - Y[:4]) ** 2)


def test_total_loss_over_a_dataset_the_test_builds():
    dataset = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4)
    want = sum(float(np.mean((X[i:i + 4] @ W - Y[i:i + 4]) ** 2)) for i in (0, 4))
    np.testing.assert_allclose(total_loss(W, dataset), want, rtol=1e-5)


def test_the_package_pipeline_feeds_the_step():
    losses = [float(step(W, x, y)) for x, y in make_dataset(X, Y)]
    assert len(losses) == 2 and all(np.isfinite(losses))
''',
}


def _tern(cwd: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tern", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    root = tmp_path_factory.mktemp("tfdata")
    for rel, text in PKG.items():
        (root / "pipe" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "pipe" / rel).write_text(text)
    (root / "pyproject.toml").write_text("")
    proc = _tern(root, "migrate", "pipe", "--out", "out/pipe")
    return root, proc, json.loads((root / "out" / "pipe.tern-report.json").read_text())


def test_migrate_reports_the_pipeline_as_allowed_tf_not_residue(migrated):
    root, proc, report = migrated
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["totals"]["todos"] == 0 and report["totals"]["allowed_tf"] > 0
    allowed = {f["path"]: [(u["construct"], u["line"]) for u in f["allowed"]] for f in report["files"]}
    data = (root / "out" / "pipe" / "data.py").read_text().splitlines()
    assert [c for c, _ in allowed["data.py"]] == [
        "tf.data.Dataset.from_tensor_slices", "tf.cast", "tf.float32", "tf.data.AUTOTUNE", "tf.data.AUTOTUNE"]
    for construct, line in allowed["data.py"]:
        assert construct.rpartition(".")[2] in data[line - 1]
    assert "allowed TF uses" in proc.stdout
    assert "## Allowed TF use" in (root / "out" / "pipe.tern-report.md").read_text()


def test_migrate_keeps_the_pipeline_and_bridges_the_loops(migrated):
    root, _, _ = migrated
    out = root / "out" / "pipe"
    data, train, test = ((out / name).read_text() for name in ("data.py", "train.py", "train_test.py"))
    assert "TODO(tern)" not in data + train + test
    assert "# tern: kept for tf.data input pipelines" in data and "tf.cast(a, tf.float32) * 2.0" in data
    assert "@jax.jit" in train and "import tensorflow" not in train
    assert "for x, y in as_numpy_batches(dataset))" in train
    assert "for x, y in as_numpy_batches(make_dataset(X, Y))]" in test
    assert scan.tensorflow_left(out) == [] and tree_keeps_only_allowed_tf(out)


def test_verify_runs_the_translated_tests_where_tf_data_imports(migrated):
    root, _, _ = migrated
    proc = _tern(root, "verify", "out/pipe", "--daemon", "never", "--json", "verify.json")
    report = json.loads((root / "verify.json").read_text())
    rows = [row for package in report["packages"] for row in package["rows"]]
    tests = {test: outcome for row in rows for test, outcome in row["tests"].items()}
    assert len(tests) == 2 and set(tests.values()) == {"passed"}, proc.stdout + proc.stderr
    assert not [p for row in rows for p in row["problems"] if "import" in p], proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_fixture_status_says_what_pass_means():
    text = (ROOT / "fixtures" / "expected" / "status.toml").read_text()
    assert "except for tf.data" in text
    assert set(tomllib.loads(text)["fixture"].values()) <= {"pass", "residue"}
