"""``tern eval`` the way a user runs it: the CLI on a small suite of fixture packages.

One project (a temporary directory with its own ``.tern/`` and daemon) serves the module.
The suite holds a correct package (verified), a deliberately wrong translation (a
mismatch: failed), a residue fixture (failed), a package with nothing to compare
(unverified) and one with a translated module beside a residue one (partially
verified). Then: a rerun is served whole from the cache without starting the sandbox; a
rule broken in a copy of the rule tables shows up as a regression against a saved
baseline (exit 1); two runs are compared; bad input exits 2; the HTML report is opened in
headless Chromium. No test measures wall-clock time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "tf"
WRONG = ROOT / "fixtures" / "wrong"

GATE = '''
import tensorflow as tf


class Gate(tf.keras.layers.Layer):
    """A gated projection: proj(x) * sigmoid(gate(x))."""

    def __init__(self, units=4, **kwargs):
        super().__init__(**kwargs)
        self.proj = tf.keras.layers.Dense(units)
        self.gate = tf.keras.layers.Dense(units, activation="sigmoid")

    def call(self, inputs):
        return self.proj(inputs) * self.gate(inputs)
'''

GATE_TEST = '''
import numpy as np
import tensorflow as tf

from halfway.layers import Gate


class GateTest(tf.test.TestCase):
    def test_shape(self):
        y = Gate(units=3)(np.ones((2, 5), "float32"))
        self.assertEqual(y.shape, (2, 3))
'''

STRINGS = '''
import tensorflow as tf


def normalize(text):
    return tf.strings.regex_replace(tf.strings.lower(text), "[^a-z ]", "")
'''

SUITE = f'''
[suite]
name = "small"

[[case]]
path = "{FIXTURES / 'custom_dense'}"
expect = "verified"

[[case]]
path = "{FIXTURES / 'group_norm_gelu'}"
expect = "verified"

[[case]]
name = "wrong_gelu"
path = "{WRONG / 'group_norm_gelu'}"
original = "{FIXTURES / 'group_norm_gelu'}"
expect = "failed"

[[case]]
path = "{FIXTURES / 'beyond_ragged'}"
expect = "failed"

[[case]]
path = "gates"
expect = "unverified"

[[case]]
path = "halfway"
expect = "partially verified"
'''

GELU = f'''
[suite]
name = "gelu"

[[case]]
path = "{FIXTURES / 'group_norm_gelu'}"
'''


def tern(project: Path, *args: str, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tern", *args], check=False, capture_output=True, text=True, cwd=project,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200", **(env or {})})


def write_package(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("evalproject")
    (root / "pyproject.toml").write_text("[project]\nname = 'eval-tests'\n")
    write_package(root, {"gates/__init__.py": "", "gates/layers.py": GATE})
    write_package(root, {"halfway/__init__.py": "", "halfway/layers.py": GATE, "halfway/layers_test.py": GATE_TEST,
                         "halfway/strings.py": STRINGS})
    (root / "suite.toml").write_text(SUITE)
    (root / "gelu.toml").write_text(GELU)
    (root / "dense.toml").write_text(f"[[case]]\npath = \"{FIXTURES / 'custom_dense'}\"\n")
    yield root
    tern(root, "serve", "--stop", "--project", str(root), timeout=120)


def broken_tern(tmp: Path) -> Path:
    """A copy of tern whose rule table writes Flax's approximate gelu for Keras' exact one."""
    src = tmp / "src"
    shutil.copytree(ROOT / "tern", src / "tern", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "rules", src / "tern_rules", ignore=shutil.ignore_patterns("__pycache__"))
    table = src / "tern_rules" / "values" / "activations.toml"
    text = table.read_text()
    record = 'source = "gelu"\ntarget = "functools.partial(jax.nn.gelu, approximate=False)"'
    assert record in text, "the gelu record moved: update this test"
    table.write_text(text.replace(record, 'source = "gelu"\ntarget = "jax.nn.gelu"'))
    return src


@pytest.fixture(scope="module")
def first(project):
    proc = tern(project, "eval", "suite.toml", "--json", "first.json", "--markdown", "first.md", "--html", "first.html")
    assert (project / "first.json").exists(), proc.stdout + proc.stderr
    return proc, json.loads((project / "first.json").read_text())


@pytest.fixture(scope="module")
def second(project, first):
    proc = tern(project, "eval", "suite.toml", "--json", "second.json")
    assert (project / "second.json").exists(), proc.stdout + proc.stderr
    return proc, json.loads((project / "second.json").read_text())


def cases(report: dict) -> dict[str, dict]:
    return {case["name"]: case for case in report["cases"]}


def test_each_case_gets_its_status(first):
    proc, report = first
    found = {name: case["status"] for name, case in cases(report).items()}
    assert found == {"custom_dense": "verified", "group_norm_gelu": "verified", "wrong_gelu": "failed",
                     "beyond_ragged": "failed", "gates": "unverified", "halfway": "partially verified"}, \
        {n: c["reason"] for n, c in cases(report).items()}
    assert proc.returncode == 0, proc.stdout + proc.stderr  # every case as its suite expects
    assert all(case["expectation"] == "met" for case in report["cases"])


def test_verified_means_compared_and_within_tolerance(first):
    _, report = first
    dense = cases(report)["custom_dense"]
    assert dense["translated"] and dense["residue"] == 0 and not dense["tf_left"]
    assert dense["tests_passed"] == dense["tests_total"] > 0
    assert dense["replay_matched"] == dense["replay_total"] > 0
    assert dense["max_abs"] < 1e-5 and dense["edits_rules"] > 0 and dense["edits_llm"] == 0
    assert dense["training"] == "n/a"
    # Keras's initial weights come from a TF job unless the suite's shared store has them (conftest.py)
    assert set(dense["phases"]) - {"keras_inits"} == {"migrate", "record", "replay", "search", "tests", "inits"}


def test_a_wrong_translation_is_a_mismatch(first):
    _, report = first
    wrong = cases(report)["wrong_gelu"]
    assert wrong["kind"] == "translation" and wrong["reason"].startswith("mismatch")
    assert wrong["replay_matched"] < wrong["replay_total"] and wrong["max_abs"] > 1e-5
    assert wrong["phases"]["migrate"] == 0.0 and wrong["edits_rules"] == 0


def test_residue_and_honest_scoring(first):
    _, report = first
    ragged, gates, halfway = (cases(report)[n] for n in ("beyond_ragged", "gates", "halfway"))
    assert not ragged["translated"] and ragged["residue"] > 0 and ragged["tf_left"]
    assert gates["translated"] and gates["tests_total"] == gates["replay_total"] == 0
    assert gates["reason"].startswith("nothing was compared")
    assert halfway["replay_matched"] > 0 and halfway["residue"] > 0 and "halfway.strings" in halfway["reason"]
    summary = report["summary"]
    assert summary["counts"] == {"verified": 2, "partially verified": 1, "unverified": 1, "failed": 2}
    assert summary["score"] == pytest.approx(2 / 6, abs=1e-4)  # the unverified case counts against it
    assert summary["weighted"] == pytest.approx(2.5 / 6, abs=1e-4)


def test_scorecard_json_markdown_and_html_are_written(project, first):
    proc, report = first
    assert report["schema"] == "tern-eval/1" and report["tern_version"] and report["libraries"].get("jax")
    assert report["options"]["mode"] == "rules" and report["timestamp"]
    assert "rules only" in proc.stderr
    assert "score 33.3% (2/6 verified)" in proc.stdout and "small/wrong_gelu" in proc.stdout
    markdown = (project / "first.md").read_text()
    assert "| `small/custom_dense` | ✅ verified |" in markdown and "**score 33.3%**" in markdown
    page = (project / "first.html").read_text()
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert report["run"]["runner_opened"] and report["run"]["jobs_run"] > 0


def test_a_rerun_with_nothing_changed_is_served_from_the_cache(first, second):
    proc, report = second
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = report["run"]
    assert run["case_hits"] == 6 and run["case_misses"] == 0
    assert run["runner_opened"] is False and run["jobs_run"] == 0  # not even the sandbox started
    assert all(case["cached"] for case in report["cases"])
    assert {n: c["status"] for n, c in cases(report).items()} == {n: c["status"] for n, c in cases(first[1]).items()}
    assert "sandbox not started" in proc.stdout


def test_no_cache_reruns_the_case(project, second):
    proc = tern(project, "eval", "dense.toml", "--no-cache", "--json", "nocache.json", "--out", "nocache")
    report = json.loads((project / "nocache.json").read_text())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["run"]["case_hits"] == 0 and report["run"]["runner_opened"]
    assert (project / "nocache" / "eval.html").is_file()


@pytest.fixture(scope="module")
def regression(project, second, tmp_path_factory):
    """Save a baseline (served from the cache: the case ran in the main suite), then run
    the same suite under a copy of tern with a broken rule (its own fingerprint: every
    job runs again, in a sandbox of its own so the project's daemon stays as it is)."""
    baseline = tern(project, "eval", "gelu.toml", "--json", "baseline.json")
    assert baseline.returncode == 0, baseline.stdout + baseline.stderr
    src = broken_tern(tmp_path_factory.mktemp("broken"))
    proc = tern(project, "eval", "gelu.toml", "--baseline", "baseline.json", "--json", "broken.json", "--markdown",
                "broken.md", "--daemon", "never", "--workers", "1", env={"PYTHONPATH": str(src)})
    return baseline, proc


def test_the_baseline_run_is_served_from_the_cache_too(project, regression):
    report = json.loads((project / "baseline.json").read_text())
    assert report["run"]["case_hits"] == 1 and not report["run"]["runner_opened"]


def test_a_broken_rule_is_a_regression_against_the_baseline(project, regression):
    _, proc = regression
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((project / "broken.json").read_text())
    assert report["run"]["runner_opened"] and report["run"]["jobs_run"] > 0
    assert report["tern_fingerprint"] != json.loads((project / "baseline.json").read_text())["tern_fingerprint"]
    case = report["cases"][0]
    assert case["status"] == "failed" and case["reason"].startswith("mismatch"), case["reason"]
    assert "approximate" not in (Path(case["out"]) / "model.py").read_text()  # the broken rule's translation
    regressions = report["comparison"]["regressions"]
    assert {"case": "gelu/group_norm_gelu", "what": "status", "before": "verified", "after": "failed"} in regressions
    assert "regressions" in proc.stdout and "gelu/group_norm_gelu" in proc.stdout
    assert "Regressions" in (project / "broken.md").read_text()


def test_compare_two_runs(project, regression):
    proc = tern(project, "eval", "--compare", "baseline.json", "broken.json", "--markdown", "diff.md",
                "--html", "diff.html", "--json", "diff.json", timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "score 100.0% -> 0.0%" in proc.stdout
    diff = json.loads((project / "diff.json").read_text())
    assert diff["regressions"][0]["case"] == "gelu/group_norm_gelu" and not diff["improvements"]
    assert "gelu/group_norm_gelu" in (project / "diff.md").read_text()
    same = tern(project, "eval", "--compare", "baseline.json", "baseline.json", timeout=120)
    assert same.returncode == 0 and "no regressions" in same.stdout


@pytest.mark.parametrize("args, files, message", [
    (("eval", "missing-suite"), {}, "no such suite"),
    (("eval", "bad.toml"), {"bad.toml": "[[case]\npath = 1"}, "not valid TOML"),
    (("eval", "nocase.toml"), {"nocase.toml": "[suite]\nname = 'x'\n"}, "no [[case]] entries"),
    (("eval", "badpath.toml"), {"badpath.toml": "[[case]]\npath = 'nowhere'\n"}, "is not a package directory"),
    (("eval", "gelu.toml", "--baseline", "notes.json"), {"notes.json": '{"cases": []}'}, "not the JSON of a tern eval run"),
    (("eval", "gelu.toml", "--baseline", "text.json"), {"text.json": "hello"}, "not JSON"),
    (("eval", "--compare", "one.json"), {}, "takes two eval JSON files"),
])
def test_bad_input_exits_2_with_one_clear_line(tmp_path, monkeypatch, args, files, message):
    """In-process (nothing here reaches the sandbox): usage errors come before any work."""
    from typer.testing import CliRunner

    from tern.cli import app

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "gelu.toml").write_text(GELU)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, list(args))
    stderr = result.stderr
    assert result.exit_code == 2, (result.output, stderr, result.exception)
    assert message in stderr and stderr.startswith("error: ") and len(stderr.splitlines()) == 1, stderr
    assert not (tmp_path / ".tern" / "eval").exists()


def test_llm_without_a_configured_model_is_bad_usage(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from tern.cli import app

    for name in ("TERN_LLM_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "gelu.toml").write_text(GELU)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["eval", "gelu.toml", "--llm"])
    assert result.exit_code == 2 and result.stderr.startswith("error: --llm: no LLM configured"), result.stderr


def test_provenance_is_read_from_the_migrate_report(tmp_path):
    """Edits whose rule id starts with ``llm`` are the LLM's; the agent's totals give
    attempts and tokens (the agent folds them into the migrate report)."""
    from tern.evaluation.run import facts_from_report

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("import tensorflow as tf\n\nds = tf.data.Dataset.range(3)\n")
    (tmp_path / "pkg" / "model.py").write_text("import keras\n\n\ndef f(x):\n    return x\n")
    report = {"totals": {"todos": 2}, "agent": {"attempts": 3, "tokens": 1200},
              "files": [{"path": "model.py", "status": "residue", "edits": [{"rule": "api:tf.add"}, {"rule": "llm:qwen"},
                                                                           {"rule": "layer:Dense"}]}]}
    facts = facts_from_report(report, tmp_path / "pkg", "pkg", 1.5)
    assert (facts.edits_rules, facts.edits_llm, facts.attempts, facts.tokens, facts.residue) == (2, 1, 3, 1200, 2)
    assert facts.tf_left == ["model.py:1: import keras"]  # tf.data alone is allowed
    assert facts.code_modules == ["pkg.model"] and not facts.complete


def row(module: str, status: str, cases: int = 0, tests: int = 0, problems: tuple[str, ...] = ()) -> dict:
    return {"module": module, "status": status, "tests_passed": tests if status == "equivalent" else 0,
            "tests_total": tests, "cases_matched": cases if status == "equivalent" else 0, "cases_total": cases,
            "max_abs": 1e-7 if cases else None, "max_rel": 1e-6 if cases else None, "problems": list(problems)}


@pytest.mark.parametrize("rows, code, expected", [
    ([row("p", "untested"), row("p.m", "equivalent", cases=2, tests=1)], ["p.m"], "verified"),
    ([row("p.m", "equivalent", cases=2), row("p.n", "untested")], ["p.m", "p.n"], "partially verified"),
    ([row("p.m", "equivalent", cases=2), row("p.n", "error", problems=("error: import: x",))], ["p.m", "p.n"],
     "partially verified"),
    ([row("p", "untested"), row("p.m", "untested")], ["p.m"], "unverified"),
    ([row("p.m", "equivalent", cases=2), row("p.n", "mismatch", cases=1, problems=("mismatch: p.n:F case 1: out",))],
     ["p.m", "p.n"], "failed"),
    ([row("p.m", "error", problems=("error: import: no tensorflow",))], ["p.m"], "failed"),
])
def test_status_definitions(rows, code, expected):
    from tern.evaluation.score import CaseResult, Translation, score

    result = score(CaseResult("s/c", "s", "c", "migrate", "src", "src", "out"), Translation(code_modules=code),
                   {"rows": rows, "phases": {}, "original_tests": {}})
    assert result.status == expected, result.reason


def test_compare_states_the_error_growth_rule():
    from tern.evaluation.compare import compare

    def run(*cases):
        return {"summary": {"score": 0, "weighted": 0, "counts": {}},
                "cases": [{"id": i, "status": "verified", "max_abs": e, "tests_passed": 1, "residue": 0} for i, e in cases]}

    diff = compare(run(("a", 1e-8), ("b", 1e-7), ("c", 1e-3), ("gone", 0.0)), run(("a", 5e-7), ("b", 2e-6), ("c", 1e-5), ("new", 0.0)))
    assert [(e["case"], e["what"].split(" (")[0]) for e in diff["regressions"]] == [("b", "max abs error"), ("gone", "case disappeared")]
    assert [e["case"] for e in diff["improvements"]] == ["c"] and diff["new"] == [{"case": "new", "status": "verified"}]


def test_a_directory_suite_finds_packages_and_pairs_translations(tmp_path):
    """As ``tern eval fixtures/`` reads this repository: TF packages are cases, a Flax
    package is a translation of the TF package of the same name, goldens are skipped."""
    from tern.evaluation.suite import load_suite

    corpus = tmp_path / "corpus"
    for source, dest in ((FIXTURES / "custom_dense", "tf/custom_dense"), (FIXTURES / "group_norm_gelu", "tf/group_norm_gelu"),
                         (WRONG / "group_norm_gelu", "wrong/group_norm_gelu"), (WRONG / "resnet_block", "wrong/resnet_block"),
                         (ROOT / "fixtures" / "expected" / "custom_dense", "expected/custom_dense")):
        shutil.copytree(source, corpus / dest, ignore=shutil.ignore_patterns("__pycache__"))
    suite = load_suite(corpus)
    assert [(c.id, c.kind) for c in suite.cases] == [
        ("corpus/tf/custom_dense", "migrate"), ("corpus/tf/group_norm_gelu", "migrate"),
        ("corpus/wrong/group_norm_gelu", "translation")]
    assert suite.cases[2].original == corpus / "tf" / "group_norm_gelu"
    assert len(suite.notes) == 1 and suite.notes[0].startswith("wrong/resnet_block: a JAX/Flax package with no TF package")


# -- the HTML in a real browser ----------------------------------------------------------------------

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("selenium (pip install selenium)")
    if missing:
        reason = f"no headless browser: missing {', '.join(missing)} (apt-get install chromium chromium-driver)"
        if os.environ.get("TERN_REQUIRE_BROWSER") == "1":
            pytest.fail(reason + "; TERN_REQUIRE_BROWSER=1")
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    yield driver
    driver.quit()


def test_the_html_report_opens_offline_and_shows_the_scorecard(project, first, browser):
    from selenium.webdriver.common.by import By

    browser.get((project / "first.html").as_uri())
    errors = [entry for entry in browser.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]
    assert not errors, errors
    rows = browser.find_elements(By.CSS_SELECTOR, "#scorecard tbody tr")
    shown = {row.get_attribute("data-case"): row.get_attribute("data-status") for row in rows}
    assert shown == {case["id"]: case["status"] for case in first[1]["cases"]}
    assert "score 33.3%" in browser.find_element(By.ID, "headline").text
    for chart in ("chart-status", "chart-errors", "chart-histogram", "chart-phases", "chart-share"):
        svg = browser.find_element(By.ID, chart)
        assert svg.is_displayed() and svg.size["width"] > 100 and svg.size["height"] > 20, chart
        assert svg.find_elements(By.TAG_NAME, "rect"), chart
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0  # nothing fetched
