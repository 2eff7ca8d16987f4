"""Initial weights compared as distributions (``inits.py``): the element numbering that
reads the translation's variables back in Keras's layout, the tests, and planted
initializer bugs found through the CLI on a real tree."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from tern.verify.inits import MAX_RUNS, RUNS, compare_inits, init_check, keras_layout, markers, runs_for

ROOT = Path(__file__).resolve().parents[1]


def test_markers_read_a_transposed_and_split_port_back_in_keras_layout():
    shapes = [(2, 3), (4,)]
    kernel_marks, bias_marks = markers(shapes)
    assert sorted(np.concatenate([kernel_marks.ravel(), bias_marks.ravel()])) == list(range(10))
    rng = np.random.default_rng(0)
    kernels, biases = rng.normal(size=(5, 2, 3)), rng.normal(size=(5, 4))
    placed = [(kernel_marks.T, kernels.transpose(0, 2, 1)),  # a Flax kernel laid out the other way
              (bias_marks[:2], biases[:, :2]), (bias_marks[2:], biases[:, 2:])]  # one Keras weight in two leaves
    found, problem = keras_layout(shapes, placed)
    assert problem == ""
    assert np.array_equal(found[0], kernels) and np.array_equal(found[1], biases)


def test_a_port_that_computes_or_ties_weights_is_not_read_and_an_unheld_weight_is_none():
    shapes = [(2,), (2,)]
    first, second = markers(shapes)
    runs = np.ones((3, 2))
    assert keras_layout(shapes, [(first * 0.5 + 0.25, runs), (second, runs)])[0] == []
    assert "twice" in keras_layout(shapes, [(first, runs), (first, runs), (second, runs)])[1]
    found, problem = keras_layout(shapes, [(first, runs)])
    assert problem == "" and found[0] is not None and found[1] is None
    checks, notes = compare_inits(["kernel", "bias"], found, [np.ones((3, 2)), np.ones((3, 2))])
    assert [c["name"] for c in checks] == ["init of kernel"] and checks[0]["ok"]
    assert "not held whole" in notes[0]


def test_the_tests_tell_initializers_apart_and_pass_equal_ones():
    rng = np.random.default_rng(1)
    fan = 64
    glorot = lambda: rng.uniform(-np.sqrt(3 / fan), np.sqrt(3 / fan), (50, fan, fan))  # noqa: E731 - variance 1/fan
    assert init_check("k", glorot(), glorot())["ok"]
    lecun = rng.normal(0, np.sqrt(1 / fan), (50, fan, fan))  # the same variance, another shape
    check = init_check("k", lecun, glorot())
    assert not check["ok"] and ("fourth power" in check["problem"] or "largest" in check["problem"])
    wide = init_check("e", rng.uniform(-0.075, 0.075, (50, 100, 16)), rng.uniform(-0.05, 0.05, (50, 100, 16)))
    assert not wide["ok"] and "std" in wide["problem"]
    assert not init_check("b", np.zeros((50, 4)), np.ones((50, 4)))["ok"]
    assert init_check("b", np.zeros((50, 4)), np.zeros((50, 4)))["ok"]


def test_a_p_value_is_computed_once_per_test_and_values(monkeypatch):
    """A worker answers the same runs again from memory, and any other values afresh."""
    from tern.verify import inits

    inits._P_VALUES.clear()
    rng = np.random.default_rng(3)
    got, want = rng.normal(0, 1, (50, 8, 8)), rng.normal(0, 1, (50, 8, 8))
    first = init_check("k", got, want)
    assert len(inits._P_VALUES) == 8  # two tests of four statistics
    calls = []
    real = inits._p

    def counting(name, x, y, test):
        return real(name, x, y, lambda: calls.append(name) or test())

    monkeypatch.setattr(inits, "_p", counting)
    assert init_check("k", got, want) == first and calls == []
    # other values on either side: every test runs, and finds the scale
    wider, narrower = init_check("k", got * 1.5, want), init_check("k", got, want * 1.5)
    assert len(calls) == 16 and first["ok"] and not wider["ok"] and not narrower["ok"]


def test_a_small_layer_gets_the_runs_that_tell_its_initializers_apart():
    """Glorot uniform against LeCun normal on a (4, 2) output kernel (variances 1/3 and 1/4):
    each run's statistics of 8 elements are noisy, and 50 runs a side do not reach 1e-6."""
    rng = np.random.default_rng(3)
    shapes = [(16, 4), (4,), (4, 2), (2,)]
    runs = runs_for(shapes)
    assert RUNS < runs <= MAX_RUNS and runs_for([(512, 512)]) == RUNS and runs_for([(2,)]) == MAX_RUNS

    def glorot(n):
        return rng.uniform(-np.sqrt(6 / 6), np.sqrt(6 / 6), (n, 4, 2))

    def lecun(n):  # truncated at two standard deviations, rescaled to variance 1/4
        drawn = rng.normal(0, np.sqrt(1 / 4) / 0.87962566, (n * 4, 4, 2))
        return np.concatenate([d[None] for d in drawn if np.all(np.abs(d) < 2 * np.sqrt(1 / 4) / 0.87962566)])[:n]

    assert not init_check("kernel", lecun(runs), glorot(runs))["ok"]
    assert init_check("kernel", glorot(runs), glorot(runs))["ok"] and init_check("kernel", glorot(RUNS), glorot(runs))["ok"]


def test_a_weight_keras_draws_the_same_every_run_is_compared_only_when_built_that_way():
    rng = np.random.default_rng(2)
    forget_gate = np.tile(np.array([0.0, 0.0, 1.0, 0.0]), (50, 1))  # an LSTM's bias: the same on every run
    checks, notes = compare_inits(["bias"], [forget_gate.copy()], [forget_gate])
    assert checks[0]["ok"] and not notes
    checks, _ = compare_inits(["bias"], [rng.normal(size=(50, 4))], [forget_gate])
    assert not checks[0]["ok"]
    seeded = np.tile(rng.normal(size=(1, 16)), (50, 1))  # GlorotUniform(seed=1): drawn once, the same every run
    checks, notes = compare_inits(["kernel"], [rng.normal(size=(50, 16))], [seeded])
    assert checks == [] and "seeded" in notes[0]
    checks, notes = compare_inits(["seed_generator/seed_generator_state"], [None], [np.zeros((50, 2))])
    assert checks == [] and notes == []  # a Keras RNG state is no weight


def _verify(project: Path, translated: Path, original: Path, daemon: str = "never") -> dict:
    out = project / "report.json"
    run = subprocess.run([sys.executable, "-m", "tern", "verify", str(translated), "--original", str(original),
                          "--daemon", daemon, "--no-search", "--json", str(out)], cwd=project, capture_output=True,
                         text=True, timeout=900)
    assert out.exists(), run.stdout + run.stderr
    return json.loads(out.read_text())


def test_the_initial_weights_and_the_search_findings_merge_either_mismatch_winning():
    from tern.status import Status
    from tern.verify.run import both_checks

    replayed = [{"id": i, "status": Status.MATCH} for i in "abc"]
    inited = {"cases": [{**replayed[0], "init": [{"ok": False}], "status": Status.MISMATCH},
                        {**replayed[1], "init": [{"ok": True}], "init_notes": ["state not compared"]}, replayed[2]]}
    searched = {"import_error": "", "cases": [{**replayed[0], "search": {"rounds": 2}},
                                              {**replayed[1], "search": {"rounds": 2}, "status": Status.MISMATCH},
                                              replayed[2]]}
    merged = {c["id"]: c for c in both_checks(inited, searched)["cases"]}
    assert merged["a"] == {"id": "a", "status": Status.MISMATCH, "search": {"rounds": 2}, "init": [{"ok": False}]}
    assert merged["b"]["status"] == Status.MISMATCH and merged["b"]["init_notes"] == ["state not compared"]
    assert merged["c"] == replayed[2] and both_checks(inited, searched)["import_error"] == ""


def test_planted_initializer_bugs_are_mismatches_named_by_weight(tmp_path):
    """The fixture's translation with two Keras defaults lost: the embedding's uniform range
    widened by half, and a Dense kernel from Flax's own default (LeCun normal) instead of
    Keras's Glorot uniform. The replay ports Keras's weights, so it cannot see either."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    original = ROOT / "fixtures" / "tf" / "embedding_pooling"
    translated = tmp_path / "embedding_pooling"
    shutil.copytree(ROOT / "fixtures" / "expected" / "embedding_pooling", translated)
    model = translated / "model.py"
    text = model.read_text()
    bag, _, rest = text.partition("def build_positional_classifier")
    bag = bag.replace("minval=-0.05, maxval=0.05", "minval=-0.075, maxval=0.075")
    rest = rest.replace("nn.Dense(2, kernel_init=nn.initializers.glorot_uniform())", "nn.Dense(2)")
    assert bag != text.partition("def build_positional_classifier")[0] and "nn.Dense(2)(" in rest
    model.write_text(bag + "def build_positional_classifier" + rest)
    report = _verify(tmp_path, translated, original)
    cases = [c for p in report["packages"] for row in p["rows"] for c in row["cases"]]
    for target, weight in (("build_bag_of_embeddings", "init of embedding/embeddings"),
                           ("build_positional_classifier", "init of dense/kernel")):
        compared = [c for c in cases if c["target"].endswith(f":{target}") and any("init of" in x["name"] for x in c["compared"])]
        assert compared  # the first case of each model and configuration the tests build
        for case in compared:
            assert case["status"] == "mismatch", case
            failed = [c["name"] for c in case["compared"] if not c["ok"]]
            assert failed == [weight], failed  # every other weight, and every output, agrees
    problems = [p for package in report["packages"] for row in package["rows"] for p in row["problems"]]
    assert any("init of embedding/embeddings" in p and "initial values differ" in p for p in problems), problems


def test_a_model_only_training_steps_use_has_its_initial_weights_compared(tmp_path):
    """The step replays start from Keras's weights, ported, so a model trained from scratch
    (what a training step is for) starting from Flax's defaults went through: with its
    first kernel's ``kernel_init`` dropped, the session that replays equal is a mismatch
    naming that kernel, and the golden translation's sessions compare every kernel and bias.

    The same planted run (one warm verify, not two) also plants ``g / clipnorm`` for the SGD's
    ``g * clipnorm / max(|g|, clipnorm)``, which the tests' ``clipnorm=1.0`` hides: the
    recorder calls each configuration function again with one argument changed
    (``record_config_variants``), and the case at ``clipnorm=0.5`` is a mismatch while the
    tests' own configurations match."""
    original = ROOT / "fixtures" / "tf" / "train_schedule_clipping"
    translated = tmp_path / "train_schedule_clipping"
    shutil.copytree(ROOT / "fixtures" / "expected" / "train_schedule_clipping", translated)
    train = translated / "train.py"
    text = train.read_text()
    first = "nn.Dense(hidden_units, kernel_init=nn.initializers.glorot_uniform())"
    clip = "lambda g, _: g * clipnorm / jnp.maximum"
    assert text.count(first) == 1 and text.count(clip) == 1
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'p'\n")

    def sessions(report: dict) -> list[dict]:
        return [s for p in report["packages"] for step in p["training"]["steps"] for s in step["sessions"]]

    try:  # the second run through the first's warm workers
        golden_report = _verify(project, translated, original, "auto")
        golden = sessions(golden_report)
        assert golden and all(s["status"] == "equivalent" for s in golden), golden
        compared = [s for s in golden if s.get("init")]
        assert compared and all(c["ok"] for s in compared for c in s["init"])
        assert {c["name"] for c in compared[0]["init"]} >= {"init of dense/kernel", "init of dense/bias"}
        assert all(c["status"] == "match" for c in _configurations(golden_report))  # the variants too
        train.write_text(text.replace(first, "nn.Dense(hidden_units)").replace(clip, "lambda g, _: g / clipnorm / jnp.maximum"))
        report = _verify(project, translated, original, "auto")
    finally:
        subprocess.run([sys.executable, "-m", "tern", "serve", "--stop", "--project", str(project)], capture_output=True)
    planted = [s for s in sessions(report) if s.get("init")]
    assert planted and all(s["status"] == "mismatch" for s in planted), planted
    for session in planted:
        assert [c["name"] for c in session["init"] if not c["ok"]] == ["init of dense/kernel"], session["init"]
    problems = [p for package in report["packages"] for row in package["rows"] for p in row["problems"]]
    assert any("initial weights" in p and "init of dense/kernel" in p for p in problems), problems
    configurations = _configurations(report)
    tests = [c["status"] for c in configurations if not c.get("note", "").startswith("built with ")]
    by_variant = {c["note"].split()[2]: c["status"] for c in configurations if c.get("note", "").startswith("built with ")}
    assert tests and all(s == "match" for s in tests)  # the tests' configurations: the bug is invisible there
    assert by_variant["clipnorm=0.5"] == "mismatch", by_variant
    assert by_variant["decay_steps=1"] == "match"  # one change at a time: the others agree


def _configurations(report: dict) -> list[dict]:
    """The cases of ``train_schedule_clipping``'s SGD factory: the tests' and its variants."""
    return [c for p in report["packages"] for row in p["rows"] for c in row["cases"]
            if c["target"].endswith(":make_sgd_with_decay")]
