"""``tern verify`` the way a user runs it: the CLI on the fixture translations.

One project (a temporary directory with its own ``.tern/``) and one daemon serve the
whole module, as they would serve a user's shell: the first run records the original TF
tests and replays everything; later runs show the cache at work. The expected status of
every module is written in ``fixtures/expected/verify.toml``, each non-equivalent one
with the reason; ``fixtures/wrong`` holds translations with a deliberate mistake, which
must come out as mismatches.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tern.sandbox.client import request
from tern.sandbox.daemon import paths_for

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "tf"
EXPECTED = ROOT / "fixtures" / "expected"
WRONG = ROOT / "fixtures" / "wrong"
EXPECT = tomllib.loads((EXPECTED / "verify.toml").read_text())["module"]


def tern(project: Path, *args: str, timeout: float = 1200, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tern", *args], capture_output=True, text=True, cwd=project,
                          timeout=timeout, env={**__import__("os").environ, "COLUMNS": "200", **env})


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    (root / "pyproject.toml").write_text("[project]\nname = 'verify-tests'\n")
    shutil.copytree(EXPECTED, root / "out", ignore=shutil.ignore_patterns("__pycache__", "*.toml"))
    yield root
    tern(root, "serve", "--stop", "--project", str(root), timeout=120)


def verify(project: Path, name: str, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    report = project / f"{name}.json"
    proc = tern(project, "verify", "out", "--original", str(FIXTURES), "--json", str(report), *extra)
    assert report.exists(), proc.stdout + proc.stderr
    return proc, json.loads(report.read_text())


def rows(report: dict) -> dict[str, dict]:
    return {row["module"]: row for package in report["packages"] for row in package["rows"]}


@pytest.fixture(scope="module")
def first(project):
    return verify(project, "first")


@pytest.fixture(scope="module")
def second(project, first):
    return verify(project, "second")


def test_every_module_has_its_expected_status(first):
    proc, report = first
    found = {module: row["status"] for module, row in rows(report).items()}
    assert found == EXPECT, "\n".join(
        f"{m}: expected {EXPECT.get(m)}, got {found.get(m)}: {rows(report).get(m, {}).get('problems')}"
        for m in sorted(set(found) | set(EXPECT)) if found.get(m) != EXPECT.get(m))
    assert proc.returncode == 1  # some fixtures are expected mismatches and errors


def test_equivalent_means_something_was_compared_and_agreed(first):
    _, report = first
    for module, row in rows(report).items():
        if row["status"] == "equivalent":  # compared itself, or through replays and tests that ran its code
            assert row["cases_total"] + row["tests_total"] > 0 or row["covered_by"], module
            assert row["cases_matched"] == row["cases_total"] and row["tests_passed"] == row["tests_total"], module
            assert not row["problems"], module
        if row["status"] == "untested":
            assert row["cases_total"] == row["tests_total"] == 0, module


def test_replayed_layers_agree_within_float32_tolerance(first):
    _, report = first
    equivalent = [row for row in rows(report).values() if row["status"] == "equivalent" and row["cases_total"]]
    assert len(equivalent) >= 15
    # float32: a transformer's attention and layer norms (train_transformer_finetune.model) reach 2.3e-5;
    # a policy head at temperature 1e-3 (sampling_heads.heads) has logits near 1e3, rounded to 2.4e-4
    assert all(row["max_abs"] is not None and row["max_abs"] < (1e-3 if row["module"] == "sampling_heads.heads" else 1e-4)
               for row in equivalent)


def test_training_steps_are_replayed_with_frozen_layers_and_fit_is_reported(first):
    _, report = first
    steps = {(s["module"], s["function"]): s for package in report["packages"]
             for s in (package.get("training") or {}).get("steps", [])}
    finetune = steps[("train_transformer_finetune.finetune", "finetune_step")]
    assert finetune["status"] == "equivalent" and len(finetune["sessions"]) == 2  # the test froze the body first
    # epoch loops, replayed as one call on the passes the original made over its (reshuffled) dataset
    for module, function, updates in (("train_custom_loop.train", "train", 16), ("train_wgan_gp.train", "train", 60),
                                      ("train_schedule_clipping.train", "train", 24),
                                      ("train_transformer_finetune.finetune", "finetune", 20)):  # makes its optimizer
        loops = [s for s in steps[(module, function)]["sessions"] if s.get("loop")]
        assert loops and all(s["status"] == "equivalent" for s in loops), (module, loops)
        assert max(s["updates"] for s in loops) == updates
    assert "draws injected" in steps[("train_wgan_gp.train", "train")]["sessions"][0]["note"]
    fit = steps[("train_classifier_fit.model", "Sequential.fit")]
    assert fit["status"] == "not compared" and "KerasTrainer" in next(iter(fit["not_compared"]))


def test_initial_weights_are_compared_for_trained_models_and_models_whose_call_moves_state(first):
    _, report = first
    cases = [c for package in report["packages"] for row in package["rows"] for c in row["cases"]]
    mobilenet = [c for c in cases if c["target"].endswith(":build_tiny_mobilenet")
                 and any(x["name"].startswith("init of") for x in c["compared"])]
    # its batch norms' moving statistics move in the training-mode call that builds it
    assert mobilenet and any(x["name"] == "init of depthwise_conv2d/kernel" and x["ok"] for x in mobilenet[0]["compared"])
    assert any("initial state not compared" in note for note in mobilenet[0]["init_notes"])
    sessions = [s for package in report["packages"] for step in (package.get("training") or {}).get("steps", [])
                for s in step["sessions"]]
    trained = [s for s in sessions if s.get("init")]
    assert len({s["target"] for s in trained}) >= 5 and all(c["ok"] for s in trained for c in s["init"])
    gan = {c["name"] for s in trained if s["target"].startswith("train_wgan_gp") for c in s["init"]}
    assert {"init of generator/dense/kernel", "init of critic/dense/kernel"} <= gan  # a step over two models, both


def test_original_tests_ran_and_passed_under_the_recorder(first):
    _, report = first
    for package in report["packages"]:
        outcomes = package["original_tests"]
        assert outcomes, package["package"]
        assert all(o in ("passed", "skipped") for o in outcomes.values()), package["package"]


def test_the_table_names_each_module(first):
    proc, _ = first
    assert "subclassed_model.model" in proc.stdout and "equivalent" in proc.stdout
    assert "max abs" in proc.stdout


def test_a_rerun_with_nothing_changed_is_served_from_the_cache(first, second):
    _, before = first
    proc, after = second
    assert proc.returncode == 1
    for package in after["packages"]:
        assert package["cached_jobs"] == package["jobs"], package["package"]
    assert {m: r["status"] for m, r in rows(after).items()} == {m: r["status"] for m, r in rows(before).items()}
    assert after["run"]["daemon"] is True


def test_an_edit_reruns_only_what_imports_the_edited_module(project, second):
    layers = project / "out" / "custom_dense" / "layers.py"
    layers.write_text(layers.read_text() + "\n# an edit\n")
    _, report = verify(project, "third")
    for package in report["packages"]:
        if package["package"] == "custom_dense":
            assert package["cached_jobs"] < package["jobs"]
        else:
            assert package["cached_jobs"] == package["jobs"], package["package"]
    assert rows(report)["custom_dense.layers"]["status"] == "equivalent"


def test_no_cache_runs_every_job(project, second):
    proc = tern(project, "verify", "out/custom_dense", "--original", str(FIXTURES / "custom_dense"), "--no-cache",
                "--json", str(project / "nocache.json"))
    report = json.loads((project / "nocache.json").read_text())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["packages"][0]["cached_jobs"] == 0


def test_a_conftest_of_the_users_project_reaches_neither_side(project, second):
    """The TF code base's own conftest.py, at the root of the project holding tern's state,
    is above the package: the translated tests in the JAX worker (no TensorFlow there)
    must not load it, nor the recording of the original tests."""
    conftest = project / "conftest.py"
    conftest.write_text("import tensorflow as tf\n\nraise RuntimeError('the project conftest was loaded')\n")
    try:
        proc = tern(project, "verify", "out/custom_dense", "--original", str(FIXTURES / "custom_dense"), "--no-cache",
                    "--json", str(project / "above.json"))
    finally:
        conftest.unlink()
    report = json.loads((project / "above.json").read_text())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "conftest" not in proc.stdout + proc.stderr and "was loaded" not in proc.stdout + proc.stderr
    assert rows(report)["custom_dense.layers"]["status"] == "equivalent", rows(report)["custom_dense.layers"]
    originals = report["packages"][0]["original_tests"]
    assert originals and all(o == "passed" for o in originals.values()), originals


def test_deliberately_wrong_translations_are_mismatches(project, second):
    report_path = project / "wrong.json"
    proc = tern(project, "verify", str(WRONG), "--original", str(FIXTURES), "--json", str(report_path))
    report = json.loads(report_path.read_text())
    found = rows(report)
    assert proc.returncode == 1
    assert found["group_norm_gelu.model"]["status"] == "mismatch", found["group_norm_gelu.model"]
    assert found["resnet_block.model"]["status"] == "mismatch", found["resnet_block.model"]
    assert any("max abs" in p for p in found["resnet_block.model"]["problems"])
    assert "resnet_block.model: mismatch" in proc.stdout  # the table says which module and why


def test_a_tolerance_in_config_is_applied_per_module(tmp_path):
    """The approximate GELU differs from Keras's exact one by ~1e-3: a module-level
    tolerance of 1e-2 accepts it (and says so in every compared output)."""
    project = tmp_path
    (project / "pyproject.toml").write_text(
        "[tool.tern.verify.tolerances]\n\"group_norm_gelu.model\" = { rtol = 1e-2, atol = 1e-2 }\n")
    shutil.copytree(FIXTURES / "group_norm_gelu", project / "group_norm_gelu")
    shutil.copytree(WRONG / "group_norm_gelu", project / "out" / "group_norm_gelu")
    proc = tern(project, "verify", "out/group_norm_gelu", "--original", "group_norm_gelu", "--daemon", "never",
                "--json", str(project / "r.json"))
    report = json.loads((project / "r.json").read_text())
    row = rows(report)["group_norm_gelu.model"]
    assert row["status"] == "equivalent", row
    assert proc.returncode == 0


@pytest.mark.parametrize("args, message", [
    (("verify", "does-not-exist"), "not a directory"),
    (("verify", "out/custom_dense"), "pass --original"),
    (("verify", "out", "--original", "nowhere"), "no original under"),
])
def test_bad_targets_get_a_clear_error(project, args, message):
    proc = tern(project, *args, timeout=120)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_cache_clear_empties_the_store(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / ".tern").mkdir()
    proc = tern(tmp_path, "cache", "clear", timeout=120)
    assert proc.returncode == 0 and "cleared 0" in proc.stdout


def test_projects_sharing_recordings_run_tensorflow_once(tmp_path):
    """``TERN_RECORDINGS``: a second project verifying the same original reuses the first one's
    recording and Keras runs (no TF job of those kinds), with the same verdicts; its JAX jobs
    still run."""
    reports = []
    for name in ("one", "two"):
        project = tmp_path / name
        shutil.copytree(EXPECTED / "custom_dense", project / "out" / "custom_dense", ignore=shutil.ignore_patterns("__pycache__"))
        (project / "pyproject.toml").write_text("")
        proc = tern(project, "verify", "out/custom_dense", "--original", str(FIXTURES / "custom_dense"), "--daemon", "never",
                    "--json", "r.json", TERN_RECORDINGS=str(tmp_path / "shared"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        reports.append(json.loads((project / "r.json").read_text()))
    (first_package,), (second_package,) = (r["packages"] for r in reports)
    tf_phases = ("record", "keras_inits")
    assert all(first_package["phases"].get(phase, 0) > 0 for phase in tf_phases), first_package["phases"]
    assert all(second_package["phases"].get(phase, 0) == 0 for phase in tf_phases), second_package["phases"]
    assert second_package["phases"]["replay"] > 0 and second_package["phases"]["tests"] > 0  # the project's own
    assert {m: r["status"] for m, r in rows(reports[1]).items()} == {m: r["status"] for m, r in rows(reports[0]).items()}
    shared = {p.name for p in (tmp_path / "shared" / "recordings").iterdir()}  # the recording and Keras's runs
    own = {p.name for p in (tmp_path / "two" / ".tern" / "recordings").glob("*")}  # the search's, which read the translation
    assert len(shared) == 2 and not shared & own, (shared, own)


GATE = '''
import tensorflow as tf


class Gate(tf.keras.layers.Layer):
    """A gated projection: proj(x) * sigmoid(gate(x))."""

    def __init__(self, units=4, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.proj = tf.keras.layers.Dense(units)
        self.gate = tf.keras.layers.Dense(units, activation="sigmoid")

    def call(self, inputs):
        return self.proj(inputs) * self.gate(inputs)
'''

CASES = '''
[[tool.tern.verify.cases]]
target = "gates.layers:Gate"
kwargs = { units = 3 }
inputs = [{ shape = [2, 5], dtype = "float32" }]
'''


@pytest.mark.parametrize("keras", ["keras3", "tf_keras"])
def test_a_module_without_tests_is_untested_until_config_gives_it_cases(tmp_path, keras):
    """Untested is reported as such (exit 0, never "equivalent"); a [[tool.tern.verify.cases]]
    entry makes it verifiable. Runs on Keras 3 and, selected per project, legacy Keras 2."""
    (tmp_path / "gates").mkdir()
    (tmp_path / "gates" / "__init__.py").write_text("")
    (tmp_path / "gates" / "layers.py").write_text(GATE)
    (tmp_path / "pyproject.toml").write_text(f'[tool.tern]\nkeras = "{keras}"\n')
    assert tern(tmp_path, "migrate", "gates", "--out", "out/gates", "-q").returncode == 0
    proc = tern(tmp_path, "verify", "out/gates", "--daemon", "never", "--json", "r.json")
    row = rows(json.loads((tmp_path / "r.json").read_text()))["gates.layers"]
    assert (proc.returncode, row["status"], row["cases_total"]) == (0, "untested", 0), proc.stdout
    (tmp_path / "pyproject.toml").write_text(f'[tool.tern]\nkeras = "{keras}"\n' + CASES)
    proc = tern(tmp_path, "verify", "out/gates", "--daemon", "never", "--json", "r.json")
    row = rows(json.loads((tmp_path / "r.json").read_text()))["gates.layers"]
    variants = [c for c in row["cases"] if "built with units=" in c.get("note", "")]  # and built with other units
    assert (row["status"], row["cases_matched"], row["cases_total"], len(variants)) == ("equivalent", 3, 3, 2), \
        proc.stdout + str(row)


def test_a_layer_variant_the_translation_cannot_take_is_not_compared(tmp_path):
    """A variant passes a constructor argument the tests never pass (``units=1``); a
    translation that dropped that field cannot be given it: the variant is listed as not
    compared, with the parameter named, and the tests' own case still matches."""
    (tmp_path / "gates").mkdir()
    (tmp_path / "gates" / "__init__.py").write_text("")
    (tmp_path / "gates" / "layers.py").write_text(GATE)
    (tmp_path / "pyproject.toml").write_text(CASES.replace("kwargs = { units = 3 }", "kwargs = {}"))
    assert tern(tmp_path, "migrate", "gates", "--out", "out/gates", "-q").returncode == 0
    translated = tmp_path / "out" / "gates" / "layers.py"
    source = translated.read_text()
    assert source.count("units: int = 4") == 1, source
    translated.write_text(source.replace("units: int = 4", "").replace("self.units", "4"))
    proc = tern(tmp_path, "verify", "out/gates", "--daemon", "never", "--json", "r.json")
    row = rows(json.loads((tmp_path / "r.json").read_text()))["gates.layers"]
    skipped = [c for c in row["cases"] if c["status"] == "not compared"]
    assert (row["status"], row["cases_matched"], row["cases_total"]) == ("equivalent", 1, 1), proc.stdout + str(row)
    assert [c["note"] for c in skipped] == ["built with units=1: the translation has no parameter 'units'",
                                            "built with units=5: the translation has no parameter 'units'"], row["cases"]


def test_migrate_then_verify_in_one_command(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    proc = tern(tmp_path, "migrate", str(FIXTURES / "custom_dense"), "--out", "out/custom_dense", "--verify", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "out" / "custom_dense.tern-verify.json").read_text())
    assert rows(report)["custom_dense.layers"]["status"] == "equivalent"
    tern(tmp_path, "serve", "--stop", "--project", str(tmp_path), timeout=120)


STATUS = tomllib.loads((EXPECTED / "status.toml").read_text())["fixture"]


#: Keras' and TF's mode decorators run a test once per mode (test_x_v2_eager, test_x_v2_function,
#: test_x_test_mode_graph); JAX has one mode, so the translation keeps one test of each
_MODE_SUFFIX = re.compile(r"_(v2_eager|v2_function|v1_session|test_mode_eager|test_mode_graph)$")


def _distinct_tests(original: dict) -> set[str]:
    """The original tests as the translation has them: mode variants as one test, and without
    TF's ``TestCase.test_session`` (a session helper pytest collects as a test)."""
    return {_MODE_SUFFIX.sub("", t) for t in original if not t.endswith("::test_session")}


@pytest.mark.parametrize("name", sorted(n for n, s in STATUS.items() if s == "pass"))
def test_complete_translations_import_without_tensorflow_and_keep_every_test(first, name):
    """For fixtures status.toml marks "pass": every module imports in a JAX worker (where
    TensorFlow cannot be imported), and every translated test runs and passes, as many
    as the original has (none dropped)."""
    _, report = first
    package = next(p for p in report["packages"] if p["package"] == name)
    imports = [p for row in package["rows"] for p in row["problems"] if p.startswith("error: import")]
    assert not imports, imports
    translated = {test: outcome for row in package["rows"] for test, outcome in row["tests"].items()}
    failed = {test: outcome for test, outcome in translated.items() if outcome != "passed"}
    assert translated and not failed, failed
    assert len(translated) == len(_distinct_tests(package["original_tests"])), "translated tests must not be dropped"


SCALED = '''
import tensorflow as tf


class Scaled(tf.keras.layers.Layer):
    def __init__(self, units=3, **kwargs):
        super().__init__(**kwargs)
        self.dense = tf.keras.layers.Dense(units)

    def call(self, inputs, mask=None, scale=None):
        return self.dense(inputs) * scale
'''

SCALED_TEST = '''
import numpy as np
import tensorflow as tf

from scaled.layers import Scaled


class ScaledTest(tf.test.TestCase):
    def test_scale(self):
        x = np.ones((2, 4), "float32")
        y = Scaled()(x, mask=None, scale=np.full((2, 3), 2.0, "float32"))
        self.assertEqual(y.shape, (2, 3))
'''


def _migrate_and_verify(root: Path, package: str, layers: str, test: str) -> tuple:
    """A one-module package with its test, migrated and verified: (the verify run, its row)."""
    (root / package).mkdir()
    (root / package / "__init__.py").write_text("")
    (root / package / "layers.py").write_text(layers)
    (root / package / "layers_test.py").write_text(test)
    (root / "pyproject.toml").write_text("")
    assert tern(root, "migrate", package, "--out", f"out/{package}", "-q").returncode == 0
    proc = tern(root, "verify", f"out/{package}", "--daemon", "never", "--json", "r.json")
    return proc, rows(json.loads((root / "r.json").read_text()))[f"{package}.layers"]


def test_none_arguments_do_not_shift_the_replayed_inputs(tmp_path):
    """``mask=None`` is a leaf for tf.nest but not for JAX's tree flattening: the float
    input after it must still be the one replayed (and differentiated)."""
    proc, row = _migrate_and_verify(tmp_path, "scaled", SCALED, SCALED_TEST)
    # built again with units=1 too; units=4 cannot be scaled by the test's (2, 3) array: refused, no case
    variants = [c["note"] for c in row["cases"] if "built with" in c.get("note", "")]
    assert (row["status"], row["cases_matched"], row["cases_total"]) == ("equivalent", 2, 2), proc.stdout + str(row)
    assert variants == ["built with units=1 (a configuration beyond the tests')"], variants
    gradients = [c["name"] for c in row["cases"][0]["compared"] if c["name"].startswith("d/d input")]
    assert gradients == ["d/d input[0]", "d/d input[1]"]


GUARDED = '''import tensorflow as tf


class FirstRow(tf.keras.layers.Layer):
    """The first row of each matrix, or -1s where a matrix has no columns (a guard on the shape)."""

    def call(self, x):
        def pick():
            return tf.cast(tf.argmax(x, axis=-1), tf.float32)

        def empty():
            return -tf.ones(tf.shape(x)[:-1])

        return tf.cond(tf.greater(tf.shape(x)[-1], 0), pick, empty)


class Largest(tf.keras.layers.Layer):
    """The three largest entries of each row, in no promised order."""

    def call(self, x):
        values, _ = tf.nn.top_k(x, k=3, sorted=False)
        return values
'''

GUARDED_TEST = '''import numpy as np
import tensorflow as tf

from guarded.layers import FirstRow, Largest


class FirstRowTest(tf.test.TestCase):
    def test_empty_columns(self):
        y = FirstRow()(np.zeros((2, 3, 0), "float32"))
        self.assertAllEqual(y, -np.ones((2, 3)))

    def test_columns(self):
        y = FirstRow()(np.arange(24, dtype="float32").reshape(2, 3, 4))
        self.assertAllEqual(y, np.full((2, 3), 3.0))


class LargestTest(tf.test.TestCase):
    def test_largest(self):
        y = Largest()(np.array([[1.0, 5.0, 3.0, 4.0, 2.0]], "float32"))
        self.assertAllEqual(tf.sort(y, direction="DESCENDING"), [[5.0, 4.0, 3.0]])
'''


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    root = tmp_path_factory.mktemp("guarded")
    return (root, *_migrate_and_verify(root, "guarded", GUARDED, GUARDED_TEST))


def test_a_call_that_only_eager_tf_can_trace_is_replayed_eagerly(guarded):
    """TF recorded the call eagerly: tf.cond ran one branch. A traced replay would also trace
    the other (argmax over an empty axis fails at trace time); the eager replay compares."""
    root, proc, row = guarded
    assert "eager_cond(" in (root / "out" / "guarded" / "layers.py").read_text()
    assert row["status"] == "equivalent", proc.stdout + str(row)
    first_rows = [c for c in row["cases"] if c["target"].endswith(":FirstRow")]
    assert [c["status"] for c in first_rows] == ["match", "match"], str(row)


def test_an_order_tf_leaves_unspecified_is_recorded_sorted(guarded):
    """TF's CPU kernel returns top_k(sorted=False) as [3, 4, 5]; lax.top_k sorts. Recording
    asks TF for the sorted order (its contract allows any), so the replay compares values;
    so does the search, at points of its own."""
    root, proc, row = guarded
    largest = [c for c in row["cases"] if c["target"].endswith(":Largest")]
    assert [c["status"] for c in largest] == ["match"], proc.stdout + str(row)
    assert largest[0]["compared"][0]["max_abs"] == 0.0
    # the search's points too: the rebuilt Keras layer is asked for the sorted order there
    assert largest[0]["search"]["judged"] > 0 and largest[0]["search"]["largest"]["ok"], str(largest[0])


#: (fixture, module file, correct text, a bug the translated tests let through, a rewrite that changes nothing)
PLANTED = [
    # a helper function the tests call: its recorded calls replay, every returned array compared
    ("control_flow", "ops.py", "return i + 1, 0.5 * (x + a / x)", "return i + 2, 0.5 * (x + a / x)",
     "return i + 1, (x + a / x) / 2"),
    # the tests call the model in inference only: it is replayed in training mode too
    ("resnet_block", "model.py", "x = nn.BatchNorm(epsilon=0.001)(x, use_running_average=not training)",
     "x = nn.BatchNorm(epsilon=0.001)(x, use_running_average=True)",
     "x = nn.BatchNorm(epsilon=0.001)(x, use_running_average=training is False)"),
    # dropout left on in inference: the float64 reference draws other masks, which is no rounding
    ("conv1d_audio", "model.py", "x = self.dropout(x, deterministic=not training)",
     "x = self.dropout(x, deterministic=training)", "x = self.dropout(x, deterministic=training is False)"),
    # the reconstruction is sampled, the KL term beside it is not: the KL term is compared
    ("vae_sampling", "model.py", "kl_loss = -0.5 * jnp.mean(", "kl_loss = -0.5 * jnp.sum(", "kl_loss = jnp.float32(-0.5) * jnp.mean("),
    # an epsilon out of the square root: the tests' variances hide it, the probes' small ones do not
    ("stateful_running_stats", "layers.py", "jnp.sqrt(variance.value + self.epsilon)",
     "(jnp.sqrt(variance.value) + self.epsilon)", "jnp.sqrt(self.epsilon + variance.value)"),
    # the same in a package function the tests call, probed beyond its arguments too
    ("mixed_imports", "blocks.py", "jax.lax.rsqrt(mean_square + epsilon)", "(jax.lax.rsqrt(mean_square) + epsilon)",
     "1.0 / jnp.sqrt(mean_square + epsilon)"),
    # a random layer drawing in inference too: its recorded calls (tf_keras layers) replay with Keras's draws
    ("random_layers", "layers.py", "if self.rate == 0.0 or not training:", "if self.rate == 0.0 and not training:",
     "if not training or self.rate == 0.0:"),
    # actions sampled from logits scaled wrongly, where Keras's draws cannot be injected: the sampled
    # outputs are compared as distributions over many runs; drawing from another key is harmless
    ("sampling_heads", "heads.py", 'jax.random.categorical(self.make_rng("noise"), logits,',
     'jax.random.categorical(self.make_rng("noise"), logits * 1.5,',
     'jax.random.categorical(jax.random.fold_in(self.make_rng("noise"), 1), logits,'),
    # an epoch loop's metric never reset, over a reshuffled dataset: its tests only see the loss fall; the loop is
    # replayed as one call on the batches each pass gave the original; a fresh metric per epoch is the same thing
    ("train_custom_loop", "train.py", "        loss_tracker.reset_state()", "        pass",
     '        loss_tracker = KerasMean(name="loss")'),
    # the weight decay of the optimizer a fine-tuning loop makes itself: the loop is replayed, its optimizer its own
    ("train_transformer_finetune", "finetune.py", "def finetune(state, dataset, epochs=1, learning_rate=1e-2, weight_decay=1e-2)",
     "def finetune(state, dataset, epochs=1, learning_rate=1e-2, weight_decay=0.015)",
     "def finetune(state, dataset, epochs=1, learning_rate=1e-2, weight_decay=0.01)"),
    # a norm guard's epsilon: the tests' norms are far above both, the probe's scaled-down inputs are not
    ("library_layers", "layers.py", "return x / jnp.maximum(norm, 1e-07)", "return x / jnp.maximum(norm, 1e-05)",
     "return x / jnp.maximum(1e-07, norm)"),
    # a loop bound the tests' converging calls never reach: the function is called again with num_iters=1
    ("control_flow", "ops.py", "(lambda i, v: i < num_iters)", "(lambda i, v: i <= num_iters)",
     "(lambda i, v: num_iters > i)"),
    # a float argument's default written in its place: the tests never pass another, a variant
    # halves it (upper=0.5)
    ("control_flow", "ops.py", "acc = jnp.clip(acc + x[i], lower, upper)", "acc = jnp.clip(acc + x[i], lower, 1.0)",
     "acc = jnp.minimum(jnp.maximum(acc + x[i], lower), upper)"),
    # a constructor argument not passed on to a sublayer, the tests' value written in its place: the
    # model is built again with groups=1
    ("group_norm_gelu", "model.py", "self.block2 = GroupNormConvBlock(self.filters, self.groups)",
     "self.block2 = GroupNormConvBlock(self.filters, 2)", "self.block2 = GroupNormConvBlock(self.filters, groups=self.groups)"),
    # a projection test whose one half the tests never take alone (stride 2 at equal widths): the
    # factory is built again with one more stage of the last width, widths=(8, 8), where the
    # translation's shortcut no longer fits (it raises where Keras runs)
    ("resnet_block", "model.py", "if stride != 1 or x.shape[-1] != filters:", "if stride != 1 and x.shape[-1] != filters:",
     "if x.shape[-1] != filters or stride != 1:"),
    # a factory default every test passes explicitly: compared with the original factory's
    ("depthwise_separable", "model.py", "def build_tiny_mobilenet(input_shape=(32, 32, 3)",
     "def build_tiny_mobilenet(input_shape=(32, 32, 4)", "def build_tiny_mobilenet(input_shape=(16 * 2, 32, 3)"),
    # a constructor default every test passes explicitly: compared with the Keras class's
    ("transformer_encoder", "layers.py", "embed_dim: int = 32", "embed_dim: int = 33", "embed_dim: int = 2 * 16"),
    # a model built from the models two package functions make (VAE(make_encoder(2), make_decoder(2))),
    # whose call the tests check by shape: it is built again from those calls, its weights ported
    ("train_vae_train_step", "model.py", "return self.decoder(z_mean)", "return self.decoder(z_mean) * 1.0001",
     "return self.decoder(1.0 * z_mean)"),
]


def _plant(project: Path, where: str, version: int) -> Path:
    """A directory of the PLANTED fixtures' translations, each with text ``version`` (1: the
    bug, 2: the harmless rewrite) in place of the correct one."""
    root = project / where
    for name, file, correct, *versions in PLANTED:
        if not (root / name).exists():  # a fixture may take two bugs, each where the other cannot hide it
            shutil.copytree(project / "out" / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        source = (root / name / file).read_text()
        assert source.count(correct) == 1, (name, correct)
        (root / name / file).write_text(source.replace(correct, versions[version - 1]))
    return root


def test_planted_bugs_the_tests_miss_are_mismatches_and_harmless_rewrites_are_not(project, second):
    """Bugs planted where the translated tests cannot see them (eval/bench_mutation.py found
    them surviving): verification must catch each, in the replay; the same code rewritten
    without changing behaviour stays equivalent, in both modes and for every output."""
    report_path = project / "planted.json"
    proc = tern(project, "verify", str(_plant(project, "planted", 1)), "--original", str(FIXTURES), "--json", str(report_path))
    found = rows(json.loads(report_path.read_text()))
    for name, file, *_ in PLANTED:
        row = found[f"{name}.{file.removesuffix('.py')}"]
        assert row["status"] == "mismatch" and row["tests_failed"] == 0, (name, row["problems"], proc.stdout)
        assert any(p.startswith("mismatch: ") and (" case " in p or "training step" in p) for p in row["problems"]), row["problems"]
    assert any("newton_sqrt" in p for p in found["control_flow.ops"]["problems"])
    assert any("power_iteration" in p and "@ num_iters=1" in p for p in found["control_flow.ops"]["problems"])
    assert any("clipped_cumsum" in p and "@ upper=0.5" in p for p in found["control_flow.ops"]["problems"])
    assert any("built with groups=1" in p for p in found["group_norm_gelu.model"]["problems"])
    assert any(p.startswith("mismatch: ") and "the translation raises where Keras runs: " in p
               and "built with widths=(8, 8)" in p for p in found["resnet_block.model"]["problems"])
    cases = found["resnet_block.model"]["cases"]  # the tests' own calls (inference) agree, the training-mode one not
    assert {c["status"] for c in cases} == {"match", "mismatch"}, cases
    assert any("[1]" in p for p in found["vae_sampling.model"]["problems"])  # the KL term, output [1]
    assert any("@ inputs" in p for p in found["stateful_running_stats.layers"]["problems"])  # found by a probe
    assert any("rms_normalize" in p and "@ inputs" in p for p in found["mixed_imports.blocks"]["problems"])
    assert any("default of embed_dim" in p for p in found["transformer_encoder.layers"]["problems"])
    assert any("default of input_shape (factory)" in p for p in found["depthwise_separable.model"]["problems"])
    assert any("l2_normalize_safe" in p and "@ inputs x 1e-7" in p for p in found["library_layers.layers"]["problems"])
    assert any("PolicyHead" in p and "(distribution): distributions differ" in p for p in found["sampling_heads.heads"]["problems"])
    assert any(":VAE case " in p for p in found["train_vae_train_step.model"]["problems"])
    report_path = project / "harmless.json"
    proc = tern(project, "verify", str(_plant(project, "harmless", 2)), "--original", str(FIXTURES), "--json", str(report_path))
    found = rows(json.loads(report_path.read_text()))
    for name, file, *_ in PLANTED:
        row = found[f"{name}.{file.removesuffix('.py')}"]
        compared = (row["cases_matched"], row["train_matched"])
        assert row["status"] == "equivalent" and compared == (row["cases_total"], row["train_total"]) and sum(compared) > 0, (
            name, row["problems"])
    assert proc.returncode == 0, proc.stdout


# -- the tool loop: tern mcp and the thin tern verify, on this module's warm project ---------
#
# An agent's calls go to ``tern mcp`` over stdio with the real ``mcp`` client; the project's
# daemon, cache and recordings are the ones the CLI runs above filled, so these calls show
# the loop as an agent meets it: warm. A broken copy of custom_dense computes
# ``x @ kernel + bias + 1`` and must verify as a mismatch.

SLOW_TEST = "import time\n\n\ndef test_sleeps():\n    time.sleep(600)\n"


@pytest.fixture(scope="module")
def loop(project, second):
    """Translations of custom_dense in the project: as tern wrote it, broken, and with a
    test that sleeps (for the call that must time out)."""
    root = project / "loop"
    for name in ("good", "broken", "slow"):
        shutil.copytree(EXPECTED / "custom_dense", root / name / "custom_dense", ignore=shutil.ignore_patterns("__pycache__"))
    layers = root / "broken" / "custom_dense" / "layers.py"
    assert "outputs = outputs + bias\n" in layers.read_text()
    layers.write_text(layers.read_text().replace("outputs = outputs + bias\n", "outputs = outputs + bias + 1.0\n"))
    (root / "slow" / "custom_dense" / "slow_test.py").write_text(SLOW_TEST)
    return root


@pytest.fixture(scope="module")
def agent(project, loop):
    mcp_session = pytest.importorskip("mcp_session")
    session = mcp_session.Session(project, "--timeout", "300")
    yield session
    session.close()


ORIGINAL = str(FIXTURES / "custom_dense")


def test_mcp_lists_the_tools_with_their_schemas(agent):
    tools = {t.name: t for t in agent.run(agent.client.list_tools()).tools}
    assert set(tools) == {"translate", "verify", "run_test", "explain_todo", "remaining"}
    assert tools["verify"].input_schema["required"] == ["path"]
    assert "project" not in tools["verify"].input_schema["properties"]  # the server's setting, not the agent's


def test_mcp_translates_a_file_and_one_unit(agent):
    error, answer = agent.call("translate", path=str(FIXTURES / "custom_dense" / "layers.py"), unit="CustomDense.call")
    assert not error, answer
    (only,) = answer["files"]
    assert (only["path"], only["status"], only["todos"]) == ("layers.py", "translated", [])
    assert "-import tensorflow as tf" in only["diff"]
    unit = answer["unit"]  # a Keras layer's call is the Flax module's __call__
    assert unit["name"] == "CustomDense.__call__" and unit["source"].lstrip().startswith("@nn.compact")
    assert "jnp.matmul(inputs, kernel)" in unit["source"] and "class CustomDense" not in unit["source"]


def test_mcp_verifies_a_translation_and_its_broken_copy(agent, loop):
    error, good = agent.call("verify", path=str(loop / "good" / "custom_dense"), original=ORIGINAL)
    assert not error, good
    row = next(r for r in good["modules"] if r["module"] == "custom_dense.layers")
    assert row["status"] == "equivalent" and row["max_abs_error"] < 1e-5 and good["warm_daemon"], row
    assert good["cache"]["misses"] == 0  # the CLI's runs above filled the same cache
    error, broken = agent.call("verify", path=str(loop / "broken" / "custom_dense"), original=ORIGINAL,
                               module="custom_dense.layers")
    assert not error, broken
    (row,) = broken["modules"]
    assert broken["status"] == row["status"] == "mismatch", row
    assert row["first_difference"].startswith("mismatch") and row["max_abs_error"] >= 0.5, row
    assert row["tests"]["failed"] >= 1 and broken["cache"]["hits"] >= 1  # the recording is reused


def test_mcp_runs_one_translated_test(agent, loop):
    error, answer = agent.call("run_test", path=str(loop / "broken" / "custom_dense"), original=ORIGINAL,
                               test="layers_test.py::CustomDenseTest::test_relu_and_zero_kernel")
    assert not error, answer
    (outcome,) = answer["outcomes"].values()
    assert not answer["passed"] and outcome.startswith("failure"), answer  # bias + 1: ones became twos


def test_mcp_bad_input_is_a_tool_error_and_the_server_keeps_serving(agent, loop, tmp_path):
    error, text = agent.call("verify", path=str(loop / "nowhere"))
    assert error and "no such file or directory" in text
    bad = tmp_path / "bad.py"
    bad.write_text("import tensorflow as tf\ndef f(:\n")
    error, text = agent.call("translate", path=str(bad))
    assert error and "cannot translate" in text, text
    error, text = agent.call("translate", path=str(FIXTURES / "custom_dense" / "layers.py"), unit="Nothing")
    assert error and "defines no 'Nothing'" in text
    error, text = agent.call("explain_todo", path=str(loop / "good" / "custom_dense" / "layers.py"), line=1)
    assert error and "no '# TODO(tern)'" in text
    error, text = agent.call("run_test", path=str(loop / "good" / "custom_dense"), original=ORIGINAL, test="layers_test.py")
    assert error and "FILE::NAME" in text
    error, answer = agent.call("remaining", path=str(loop / "good" / "custom_dense"))
    assert not error and answer["todos"] == [], answer


def test_mcp_explains_a_todo_and_lists_what_is_left(agent, tmp_path):
    from tern.engine.runner import migrate

    # .numpy() keeps the function out of a jax.enable_x64 scope (rules/structure/x64_scopes.py)
    (tmp_path / "uses_int64.py").write_text("import tensorflow as tf\n\n\ndef cast(x):\n    return tf.cast(x, tf.int64).numpy()\n")
    migrate(tmp_path / "uses_int64.py", tmp_path / "out.py")
    error, left = agent.call("remaining", path=str(tmp_path / "out.py"))
    assert not error, left
    todo = next(t for t in left["todos"] if t["construct"] == "tf.int64")
    error, explained = agent.call("explain_todo", path=str(tmp_path / "out.py"), line=todo["line"])
    assert not error, explained
    assert (explained["kind"], explained["record"]["source"]) == ("api", "tensorflow.int64")
    assert "never translated automatically" in explained["why"] and "jax_enable_x64" in explained["reason"]
    error, below = agent.call("explain_todo", path=str(tmp_path / "out.py"), line=todo["line"] + 2)  # the statement
    assert not error and below["symbol"] == "tf.cast" and "translates it, but not this use" in below["why"], below


def test_mcp_call_past_its_timeout_is_cancelled_and_answered(project, loop, agent):
    mcp_session = pytest.importorskip("mcp_session")
    short = mcp_session.Session(project, "--timeout", "3")
    try:
        error, text = short.call("run_test", path=str(loop / "slow" / "custom_dense"), original=ORIGINAL,
                                 test="slow_test.py::test_sleeps")
        assert error and "did not finish within 3s" in text, text
        error, answer = short.call("remaining", path=str(loop / "slow" / "custom_dense"))
        assert not error and answer["todos"] == []
    finally:
        short.close()
    in_flight = lambda: asyncio.run(request(paths_for(project), {"op": "status"}))["status"]["in_flight"]  # noqa: E731
    deadline = time.monotonic() + 120  # bounds a hang; the cancel is not timed
    while in_flight() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert in_flight() == 0  # the sleeping job went with the call


def tern_timed(project: Path, *args: str, full: bool = False) -> subprocess.CompletedProcess:
    """``tern ARGS`` under -X importtime, as a shell runs it, or (``full``) through the typer app."""
    entry = ["-c", "import sys; from tern.cli import app; app(sys.argv[1:], prog_name='tern')"] if full else ["-m", "tern"]
    return subprocess.run([sys.executable, "-X", "importtime", *entry, *args], cwd=project, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "COLUMNS": "200"})


def imported(proc: subprocess.CompletedProcess) -> set[str]:
    return {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("copy, code, extra", [("good", 0, ()), ("broken", 1, ()), ("good", 0, ("--no-search",))])
def test_thin_verify_is_answered_by_the_daemon_as_the_cli_would(project, loop, copy, code, extra):
    args = ("verify", f"loop/{copy}/custom_dense", "--original", ORIGINAL, "--json", f"loop/{copy}.json", *extra)
    tern(project, *args)  # cached from here on, whichever tests ran before (a first run says "run", not "cached")
    full = tern_timed(project, *args, full=True)
    thin = tern_timed(project, *args)
    assert "tern.thin" in imported(thin) and not {"tern.cli", "typer", "rich", "libcst"} & imported(thin), thin.stderr[-3000:]
    assert "tern.cli" in imported(full)
    assert thin.returncode == full.returncode == code, thin.stdout + thin.stderr[-2000:]
    assert thin.stdout == full.stdout and f"report loop/{copy}.json" in thin.stdout
    report = json.loads((project / "loop" / f"{copy}.json").read_text())
    assert report["run"]["daemon"] and report["run"]["cache_misses"] == 0
    cases = [c for package in report["packages"] for row in package["rows"] for c in row.get("cases", [])]
    if copy == "good":  # searched by default; --no-search: nothing searched
        assert cases and any("search" in c for c in cases) != bool(extra)


@pytest.mark.parametrize("argv", [["out", "--daemon", "never"], ["out", "--executor", "ray"], ["out", "--help"],
                                  ["out", "--no-such-option"], ["out", "other"], ["out", "--json"]])
def test_thin_verify_leaves_what_it_cannot_forward_to_the_cli(project, argv, monkeypatch):
    from tern import thin

    monkeypatch.chdir(project)
    assert thin.verify(argv) is None


# -- the thin tern migrate: a rules-only run answered by the same warm daemon --------------


def _without_importtime(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("import time:"))


def _migrated(project: Path, out: str, *args: str, full: bool) -> tuple[subprocess.CompletedProcess, dict[str, bytes]]:
    """``tern migrate ARGS`` into ``out`` (emptied first): the process and what it wrote."""
    shutil.rmtree(project / out, ignore_errors=True)
    proc = tern_timed(project, "migrate", *args, full=full)
    written = project / out
    files = {p.relative_to(written).as_posix(): p.read_bytes() for p in sorted(written.rglob("*")) if p.is_file()}
    return proc, files


@pytest.mark.parametrize("extra, code", [((), 0), (("--dry-run",), 0), (("--quiet", "--no-llm"), 0),
                                         (("--in-place",), 2), (("--report", "reports/r"), 0),
                                         (("--report", "mig/custom_dense/r"), 2)])
def test_thin_migrate_is_answered_by_the_daemon_as_the_cli_would(project, loop, extra, code):
    shutil.copytree(FIXTURES / "custom_dense", project / "mig" / "custom_dense", dirs_exist_ok=True)
    args = ("mig/custom_dense", "--out", "mig_out/custom_dense", *extra)
    full, full_files = _migrated(project, "mig_out", *args, full=True)
    thin, thin_files = _migrated(project, "mig_out", *args, full=False)
    assert "tern.thin" in imported(thin) and not {"tern.cli", "typer", "rich", "libcst"} & imported(thin), thin.stderr[-3000:]
    assert thin.returncode == full.returncode == code, thin.stdout + thin.stderr[-2000:]
    assert (thin.stdout, _without_importtime(thin.stderr)) == (full.stdout, _without_importtime(full.stderr))
    assert thin_files == full_files
    if code == 0 and "--dry-run" not in extra:
        assert b"import tensorflow" not in thin_files["custom_dense/layers.py"]
    if "reports/r" in extra:  # shown as given, written under the caller's directory
        assert "report reports/r.md" in thin.stdout and (project / "reports" / "r.json").is_file()


def test_thin_migrate_after_an_edit_writes_what_a_fresh_cli_run_writes(project, loop):
    src = project / "edit" / "custom_dense"
    shutil.copytree(FIXTURES / "custom_dense", src, dirs_exist_ok=True)
    args = ("edit/custom_dense", "--out", "edit_out/custom_dense", "--quiet")
    _migrated(project, "edit_out", *args, full=False)  # the daemon keeps these translations
    layers = src / "layers.py"
    layers.write_text(layers.read_text().replace("outputs = outputs + self.bias", "outputs = outputs - self.bias"))
    thin, thin_files = _migrated(project, "edit_out", *args, full=False)
    full, full_files = _migrated(project, "edit_out", *args, full=True)
    assert "tern.cli" not in imported(thin) and thin.returncode == full.returncode == 0, thin.stderr[-2000:]
    assert thin_files == full_files and b"outputs = outputs - bias" in thin_files["custom_dense/layers.py"]


@pytest.mark.parametrize("argv", [["src", "--verify"], ["src", "--llm"], ["src", "--model", "m"], ["src", "-j", "2"],
                                  ["src", "--jobs=2"], ["src", "--daemon", "never"], ["src", "--help"],
                                  ["src", "--no-such-option"], ["src", "other"], ["src", "--out"], ["src", "-qo", "x"]])
def test_thin_migrate_leaves_what_it_cannot_forward_to_the_cli(project, argv, monkeypatch):
    from tern import thin

    monkeypatch.chdir(project)
    assert thin.migrate(argv) is None


def test_thin_migrate_leaves_a_configured_llm_to_the_cli(project, loop, monkeypatch, capsys):
    from tern import thin
    from tern.agent.config import MODEL_ENV

    assert thin.MODEL_ENV == MODEL_ENV
    shutil.copytree(FIXTURES / "custom_dense", project / "llm" / "custom_dense", dirs_exist_ok=True)
    monkeypatch.chdir(project)
    monkeypatch.setenv(MODEL_ENV, "some-model")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert thin.migrate(["llm/custom_dense", "--out", "llm_out/custom_dense"]) is None
    assert capsys.readouterr() == ("", "") and not (project / "llm_out").exists()
    assert thin.migrate(["llm/custom_dense", "--out", "llm_out/custom_dense", "--no-llm", "--quiet"]) == 0
    assert (project / "llm_out" / "custom_dense" / "layers.py").is_file()
