"""``tern weights`` the way a user runs it: real ``python -m tern weights`` subprocesses.

The saved models are made by one TF subprocess per module (TensorFlow is imported once,
never in the pytest process), which also dumps the Keras variables so that the Flax
variables ``load_variables`` restores are compared with the originals, not only with the
report. All runs share one tmp project and its daemon (started by the first run,
stopped at teardown). No test measures wall-clock time.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from tern.sandbox.daemon import paths_for, server_pid
from tern.weights.checkpoint import CHECKPOINT, REPORT, WeightsError, load_variables

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"

# argv: fixtures/tf directory, output directory. Every saved model comes with the Keras
# values of its variables ("<name>.npz", keyed "<layer attribute or index>/<variable>").
MAKE_MODELS = r'''
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
sys.path.insert(0, sys.argv[1])
out = sys.argv[2]
import tensorflow as tf
from subclassed_model.model import MLPClassifier
from mlp_sequential.model import build_mlp
from group_norm_gelu.model import GroupNormClassifier

def dump(name, pairs):
    np.savez(f"{out}/{name}.npz", **{k: v.numpy() for k, v in pairs})

def dense(layer, key):
    return [(f"{key}/kernel", layer.kernel), (f"{key}/bias", layer.bias)]

x = np.random.default_rng(1).standard_normal((2, 12)).astype("float32")
# A subclassed keras.Model round-trips through .keras only with its default arguments:
# Keras 3's Model.__new__ drops constructor arguments, so get_config() has the defaults.
full = MLPClassifier()
full(x)
full.save(f"{out}/mlp.keras")
dump("mlp", dense(full.dense1, "dense1") + dense(full.dense2, "dense2") + dense(full.logits, "logits"))

small = MLPClassifier(hidden_units=8, num_classes=3)
small(x)
tf.train.Checkpoint(model=small).write(f"{out}/ckpt/model")
tf.saved_model.save(small, f"{out}/saved")
dump("small", dense(small.dense1, "dense1") + dense(small.dense2, "dense2") + dense(small.logits, "logits"))

seq = build_mlp(12, hidden_units=(8,), num_classes=3)
seq.save_weights(f"{out}/seq.weights.h5")
dump("seq", [(f"{i}/{v.name}", v) for i, layer in enumerate(seq.layers) for v in layer.weights])

gn = GroupNormClassifier(num_classes=3, filters=8, groups=4, hidden=16)
gn(np.zeros((2, 8, 8, 3), "float32"))
gn.save_weights(f"{out}/gn.weights.h5")
'''


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TERN_DAEMON"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("weights")
    (root / "pyproject.toml").write_text("[project]\nname = 'weights-demo'\n")
    made = subprocess.run([sys.executable, "-c", MAKE_MODELS, str(FIXTURES / "tf"), str(root)],
                          capture_output=True, text=True, env=child_env(), timeout=600)
    assert made.returncode == 0, made.stderr[-3000:]
    bad = root / "bad" / "subclassed_model"  # a translation whose dense2 is narrower than Keras's
    shutil.copytree(FIXTURES / "expected" / "subclassed_model", bad)
    model = bad / "model.py"
    model.write_text(model.read_text().replace("self.hidden_units // 2", "self.hidden_units // 4"))
    yield root
    subprocess.run([sys.executable, "-m", "tern", "serve", "--stop", "--project", str(root)],
                   capture_output=True, env=child_env(), timeout=120)
    paths = paths_for(root)
    if server_pid(paths) is None:  # lock files outlive servers by design; a tmp project needs none
        paths.pidfile.unlink(missing_ok=True)
        paths.startlock.unlink(missing_ok=True)


def tern_weights(project: Path, source: str, package: str, *args: str, translated: Path | None = None,
                 out: str = "out") -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "tern", "weights", source, "--original", str(FIXTURES / "tf" / package),
               "--translated", str(translated or FIXTURES / "expected" / package), "--out", out,
               "--project", str(project), *args]
    done = subprocess.run(command, cwd=project, capture_output=True, text=True, env=child_env(), timeout=600)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    return done


def report(out: Path) -> dict:
    return json.loads((out / REPORT).read_text())


def check_output(out: Path, keras: dict[str, str], values: Path) -> dict:
    """The run's report says equivalent; the restored leaves are the report's and the Keras values."""
    data = report(out)
    assert data["status"] == "equivalent" and data["problems"] == []
    assert all(c["ok"] and c["max_abs"] <= 1e-5 for c in data["outputs"])
    variables = load_variables(out)
    flat = {"/".join(k.key for k in path): np.asarray(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(variables)}
    assert sorted(flat) == sorted(v["path"] for v in data["variables"])
    for entry in data["variables"]:
        leaf = np.ascontiguousarray(flat[entry["path"]])
        assert list(leaf.shape) == entry["shape"] and leaf.dtype.name == entry["dtype"]
        assert hashlib.sha256(leaf.tobytes()).hexdigest() == entry["sha256"]
    assert data["ported"] == len(keras)
    original = np.load(values)
    for flax_path, keras_key in keras.items():
        np.testing.assert_array_equal(flat[flax_path], original[keras_key])
    return data


def dense_paths(prefix: dict[str, str]) -> dict[str, str]:
    return {f"params/{flax}/{leaf}": f"{keras}/{leaf}" for flax, keras in prefix.items() for leaf in ("kernel", "bias")}


MLP_PATHS = dense_paths({"dense1/layers_0": "dense1", "dense2/layers_0": "dense2", "logits": "logits"})


# ---------------------------------------------------------------------------- formats


def test_keras_file_of_a_subclassed_model_needs_no_model_option(project):
    done = tern_weights(project, "mlp.keras", "subclassed_model", out="out-keras")
    assert done.returncode == 0, done.stderr
    assert "equivalent" in done.stdout and "6 variables ported" in done.stdout
    data = check_output(project / "out-keras", MLP_PATHS, project / "mlp.npz")
    assert data["model"] == {"target": "subclassed_model.model:MLPClassifier", "kind": "class", "args": [],
                             "kwargs": {"hidden_units": 64, "num_classes": 10, "rate": 0.1}}
    assert data["format"] == "keras" and data["inputs"] == [{"shape": [2, 12], "dtype": "float32"}]


def test_weights_h5_of_a_factory_built_sequential(project):
    done = tern_weights(project, "seq.weights.h5", "mlp_sequential", "--model", "mlp_sequential.model:build_mlp",
                        "--args", "[12]", "--kwargs", '{"hidden_units": [8], "num_classes": 3}', out="out-h5")
    assert done.returncode == 0, done.stderr
    # Keras layers 0 and 2 (Dense; 1 is Dropout) are items 1 and 3 of the Flax `layers`
    # tuple (item 0 stands for the keras.Input), each a Sequential([Dense, activation])
    data = check_output(project / "out-h5", dense_paths({"layers_1/layers_0": "0", "layers_3/layers_0": "2"}),
                        project / "seq.npz")
    assert data["model"] == {"target": "mlp_sequential.model:build_mlp", "kind": "factory", "args": [12],
                             "kwargs": {"hidden_units": [8], "num_classes": 3}}
    assert data["inputs"] == [{"shape": [2, 12], "dtype": "float32"}]  # from the model's keras.Input


def test_tf_checkpoint(project):
    done = tern_weights(project, "ckpt", "subclassed_model", "--model", "subclassed_model.model:MLPClassifier",
                        "--kwargs", '{"hidden_units": 8, "num_classes": 3}', "--input-shape", "2,12", out="out-ckpt")
    assert done.returncode == 0, done.stderr
    check_output(project / "out-ckpt", MLP_PATHS, project / "small.npz")
    assert report(project / "out-ckpt")["format"] == "checkpoint"


def test_saved_model(project):
    done = tern_weights(project, "saved", "subclassed_model", "--model", "subclassed_model.model:MLPClassifier",
                        "--kwargs", '{"hidden_units": 8, "num_classes": 3}', "--input-shape", "2,12", out="out-saved")
    assert done.returncode == 0, done.stderr
    check_output(project / "out-saved", MLP_PATHS, project / "small.npz")
    assert report(project / "out-saved")["format"] == "savedmodel"


# ---------------------------------------------------------------------------- failures


def one_error_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize("source, model, words", [
    ("missing.keras", [], "no such file"),
    ("ckpt", ["--model", "subclassed_model.model:Nope"], "has no Nope"),
    ("ckpt", ["--model", "subclassed_model.nowhere:MLPClassifier"], "no module subclassed_model.nowhere"),
    ("ckpt", ["--model", "mlp_sequential.model:build_mlp"], "not in the package subclassed_model"),
    ("ckpt", [], "pass --model"),
    ("ckpt", ["--model", "subclassed_model.model:MLPClassifier"], "--input-shape"),
    ("mlp.keras", ["--format", "onnx"], "--format"),
])
def test_bad_usage_exits_2_and_writes_nothing(project, source, model, words):
    done = tern_weights(project, source, "subclassed_model", *model, out="out-usage")
    assert done.returncode == 2, done.stdout + done.stderr
    assert words in one_error_line(done)
    assert not (project / "out-usage").exists()


def test_a_model_the_checkpoint_does_not_hold_is_a_port_problem(project):
    done = tern_weights(project, "ckpt", "subclassed_model", "--model", "subclassed_model.model:DeepMLP",
                        "--input-shape", "2,12", out="out-wrong-model")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no values for" in one_error_line(done)
    data = report(project / "out-wrong-model")
    assert data["status"] == "error" and not (project / "out-wrong-model" / CHECKPOINT).exists()


def test_a_translation_whose_variables_do_not_fit(project):
    out = project / "out-bad"
    done = tern_weights(project, "mlp.keras", "subclassed_model", translated=project / "bad" / "subclassed_model",
                        out="out-bad")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "do not fit" in one_error_line(done)
    assert "dense2" in done.stdout  # the problem is listed, naming the layer
    data = report(out)
    assert data["status"] == "error" and any("dense2" in p for p in data["problems"])
    assert sorted(p.name for p in out.iterdir()) == [REPORT]
    with pytest.raises(WeightsError, match="error"):
        load_variables(out)


def test_a_numeric_mismatch_is_saved_but_not_loaded_by_default(project):
    out = project / "out-mismatch"
    done = tern_weights(project, "gn.weights.h5", "group_norm_gelu", "--model",
                        "group_norm_gelu.model:GroupNormClassifier", "--kwargs",
                        '{"num_classes": 3, "filters": 8, "groups": 4, "hidden": 16}', "--input-shape", "2,8,8,3",
                        translated=FIXTURES / "wrong" / "group_norm_gelu", out="out-mismatch")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "mismatch" in done.stdout
    data = report(out)
    assert data["status"] == "mismatch" and data["max_abs"] > 1e-5
    with pytest.raises(WeightsError, match="mismatch"):
        load_variables(out)
    assert len(load_variables(out, allow_mismatch=True)["params"]) == len({v["path"].split("/")[1] for v in data["variables"]})


def test_out_is_replaced_whole_and_a_foreign_directory_is_refused(project):
    foreign = project / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    done = tern_weights(project, "mlp.keras", "subclassed_model", out="foreign")
    assert done.returncode == 2 and "refusing" in one_error_line(done)
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    small = ("--model", "subclassed_model.model:MLPClassifier", "--kwargs", '{"hidden_units": 8, "num_classes": 3}',
             "--input-shape", "2,12")
    for source in ("ckpt", "saved"):
        done = tern_weights(project, source, "subclassed_model", *small, out="out-again")
        assert done.returncode == 0, done.stderr
    assert report(project / "out-again")["format"] == "savedmodel"
    check_output(project / "out-again", MLP_PATHS, project / "small.npz")
    assert [p.name for p in project.iterdir() if ".tern-" in p.name] == []  # no staged or replaced copies
    assert list((project / ".tern" / "weights").iterdir()) == []
