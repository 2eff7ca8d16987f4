"""The fixture packages, end to end, the way a user runs Tern.

For every package in ``fixtures/tf``: ``tern migrate`` (the real CLI, in a subprocess)
translates it; the output must equal the golden tree in ``fixtures/expected``; the
original tests must pass under TensorFlow; and, for packages ``fixtures/expected/status.toml``
marks ``pass``, the translation must import with TensorFlow blocked and all of its
translated tests must pass, with as many tests as the original (no test dropped).
Packages marked ``residue`` must report each untranslated construct precisely.

All TF runs share one interpreter and all JAX runs another (imports dominate).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tf_free_runner import junit_outcomes  # tests/ is on sys.path (pytest's rootdir insertion)

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "tf"
EXPECTED = ROOT / "fixtures" / "expected"
STATUS = tomllib.loads((EXPECTED / "status.toml").read_text())["fixture"]
NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "__init__.py").exists())
REGEN = "python tests/regen_goldens.py"


def _tern(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tern", *args], capture_output=True, text=True, cwd=ROOT)


@pytest.fixture(scope="session")
def translated(tmp_path_factory) -> dict[str, tuple[Path, subprocess.CompletedProcess, dict]]:
    out = tmp_path_factory.mktemp("jax")
    def run(name):
        proc = _tern("migrate", str(FIXTURES / name), "--out", str(out / name), "-q")
        report = json.loads((out / f"{name}.tern-report.json").read_text())
        return name, (out / name, proc, report)
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, NAMES))


def _pytest_json(tmp_path_factory, root: Path, packages: list[str], block_tf: bool) -> dict:
    result = tmp_path_factory.mktemp("results") / "result.json"
    if block_tf:
        cmd = [sys.executable, str(Path(__file__).with_name("tf_free_runner.py")), str(root), str(result), *packages]
    else:
        junit = result.with_suffix(".xml")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root), "-c", os.devnull,
               f"--junitxml={junit}", "-o", "junit_family=xunit1", *[str(root / p) for p in packages]]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env, timeout=1200)
    if block_tf:
        assert result.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
        return json.loads(result.read_text())
    return {"tests": junit_outcomes(junit), "output": proc.stdout[-2000:]}


@pytest.fixture(scope="session")
def original_results(tmp_path_factory):
    return _pytest_json(tmp_path_factory, FIXTURES, NAMES, block_tf=False)


@pytest.fixture(scope="session")
def translated_results(tmp_path_factory, translated):
    out = next(iter(translated.values()))[0].parent
    return _pytest_json(tmp_path_factory, out, [n for n in NAMES if STATUS.get(n) == "pass"], block_tf=True)


def test_every_fixture_has_a_status():
    assert set(STATUS) == set(NAMES), f"status.toml and fixtures/tf disagree: {set(STATUS) ^ set(NAMES)}"
    assert set(STATUS.values()) <= {"pass", "residue"}
    assert sum(v == "pass" for v in STATUS.values()) >= 20


@pytest.mark.parametrize("name", NAMES)
def test_translation_matches_golden(name, translated):
    out, proc, _ = translated[name]
    assert proc.returncode in (0, 1), proc.stderr
    produced = {p.relative_to(out).as_posix(): p.read_text() for p in out.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    golden_root = EXPECTED / name
    golden = {p.relative_to(golden_root).as_posix(): p.read_text() for p in golden_root.rglob("*") if p.is_file()}
    assert sorted(produced) == sorted(golden), f"file sets differ; if intended, run: {REGEN} {name}"
    for rel, text in produced.items():
        assert text == golden[rel], f"{name}/{rel} differs from its golden file; if intended, run: {REGEN} {name}"


@pytest.mark.parametrize("name", NAMES)
def test_original_tests_pass_under_tensorflow(name, original_results):
    tests = original_results["tests"].get(name, {})
    assert tests, f"no TF tests ran for {name}: {original_results['output']}"
    failed = {k: v for k, v in tests.items() if v != "passed"}
    assert not failed, failed


@pytest.mark.parametrize("name", [n for n in NAMES if STATUS.get(n) == "pass"])
def test_translation_runs_without_tensorflow(name, translated, translated_results, original_results):
    _, proc, report = translated[name]
    assert proc.returncode == 0, f"residue or errors left: {report['totals']}\n{proc.stdout}"
    imports = translated_results["imports"][name]
    assert imports and all(v == "ok" for v in imports.values()), imports
    tests = translated_results["tests"].get(name, {})
    failed = {k: v for k, v in tests.items() if v != "passed"}
    assert not failed, failed
    assert len(tests) == len(original_results["tests"][name]), "translated tests must not be dropped"


@pytest.mark.parametrize("name", [n for n in NAMES if STATUS.get(n) == "residue"])
def test_residue_is_reported_precisely(name, translated):
    out, proc, report = translated[name]
    assert proc.returncode == 1, proc.stderr
    todos = [(f["path"], t) for f in report["files"] for t in f["todos"]]
    assert todos
    for path, todo in todos:
        assert todo["construct"] and todo["reason"]
        lines = (out / path).read_text().splitlines()
        assert "TODO(tern)" in lines[todo["line"] - 2], (path, todo)
