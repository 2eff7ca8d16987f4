"""The fixture packages through ``tern migrate``, the way a user runs it.

For every package in ``fixtures/tf``: the real CLI, in a subprocess, translates it; the
output must equal the golden tree in ``fixtures/expected``. Packages
``fixtures/expected/status.toml`` marks ``pass`` must translate with no residue and
import no TensorFlow except for tf.data input pipelines; those marked ``residue`` must
report each untranslated construct precisely.

Running the goldens is ``tests/test_verify.py``'s job: it verifies ``fixtures/expected``
against ``fixtures/tf`` in the sandbox (original tests under TensorFlow, translated tests
with TensorFlow unimportable, every layer call replayed).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tern.evaluation.scan import tensorflow_left

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


@pytest.mark.parametrize("name", [n for n in NAMES if STATUS.get(n) == "pass"])
def test_complete_translations_leave_no_residue(name, translated):
    _, proc, report = translated[name]
    assert proc.returncode == 0, f"residue or errors left: {report['totals']}\n{proc.stdout}"


@pytest.mark.parametrize("name", [n for n in NAMES if STATUS.get(n) == "pass"])
def test_complete_translations_import_no_tensorflow_except_for_tf_data(name, translated):
    """Strict: every TF import left is used for tf.data input pipelines alone (tern/features/tf_data/kept.py),
    never a Keras import, never TF outside tf.data or under jax.jit."""
    out, _, _ = translated[name]
    assert tensorflow_left(out) == []


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
