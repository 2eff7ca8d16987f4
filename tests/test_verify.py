"""``tern verify`` the way a user runs it: the CLI on the fixture translations.

One project (a temporary directory with its own ``.tern/``) and one daemon serve the
whole module, as they would serve a user's shell: the first run records the original TF
tests and replays everything; later runs show the cache at work. The expected status of
every module is written in ``fixtures/expected/verify.toml``, each non-equivalent one
with the reason; ``fixtures/wrong`` holds translations with a deliberate mistake, which
must come out as mismatches.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "tf"
EXPECTED = ROOT / "fixtures" / "expected"
WRONG = ROOT / "fixtures" / "wrong"
EXPECT = tomllib.loads((EXPECTED / "verify.toml").read_text())["module"]


def tern(project: Path, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tern", *args], capture_output=True, text=True, cwd=project,
                          timeout=timeout, env={**__import__("os").environ, "COLUMNS": "200"})


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
    # float32: a transformer's attention and layer norms (train_transformer_finetune.model) reach 2.3e-5
    assert all(row["max_abs"] is not None and row["max_abs"] < 1e-4 for row in equivalent)


def test_training_steps_are_replayed_with_frozen_layers_and_fit_is_reported(first):
    _, report = first
    steps = {(s["module"], s["function"]): s for package in report["packages"]
             for s in (package.get("training") or {}).get("steps", [])}
    finetune = steps[("train_transformer_finetune.finetune", "finetune_step")]
    assert finetune["status"] == "equivalent" and len(finetune["sessions"]) == 2  # the test froze the body first
    fit = steps[("train_classifier_fit.model", "Sequential.fit")]
    assert fit["status"] == "not compared" and "KerasTrainer" in next(iter(fit["not_compared"]))


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
    assert (row["status"], row["cases_matched"], row["cases_total"]) == ("equivalent", 1, 1), proc.stdout + str(row)


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
    assert (row["status"], row["cases_matched"], row["cases_total"]) == ("equivalent", 1, 1), proc.stdout + str(row)
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
    asks TF for the sorted order (its contract allows any), so the replay compares values."""
    root, proc, row = guarded
    largest = [c for c in row["cases"] if c["target"].endswith(":Largest")]
    assert [c["status"] for c in largest] == ["match"], proc.stdout + str(row)
    assert largest[0]["compared"][0]["max_abs"] == 0.0


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
]


def _plant(project: Path, where: str, version: int) -> Path:
    """A directory of the PLANTED fixtures' translations, each with text ``version`` (1: the
    bug, 2: the harmless rewrite) in place of the correct one."""
    root = project / where
    for name, file, correct, *versions in PLANTED:
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
        assert any(p.startswith("mismatch: ") and " case " in p for p in row["problems"]), row["problems"]
    assert any("newton_sqrt" in p for p in found["control_flow.ops"]["problems"])
    cases = found["resnet_block.model"]["cases"]  # the tests' own calls (inference) agree, the training-mode one not
    assert {c["status"] for c in cases} == {"match", "mismatch"}, cases
    assert any("[1]" in p for p in found["vae_sampling.model"]["problems"])  # the KL term, output [1]
    report_path = project / "harmless.json"
    proc = tern(project, "verify", str(_plant(project, "harmless", 2)), "--original", str(FIXTURES), "--json", str(report_path))
    found = rows(json.loads(report_path.read_text()))
    for name, file, *_ in PLANTED:
        row = found[f"{name}.{file.removesuffix('.py')}"]
        assert row["status"] == "equivalent" and row["cases_matched"] == row["cases_total"] > 0, (name, row["problems"])
    assert proc.returncode == 0, proc.stdout
