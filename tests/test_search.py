"""The search beyond the probes (``search.py``), through the CLI on real trees.

A small TF package whose test calls its layers on ``tf.ones`` (a common way to write a
shape test), and translations of it. Constant inputs stay constant under every fixed
probe (scales, a shift, shrinking to the mean), so a variance taken over the wrong axis
agrees at all of them, in outputs and in gradients (a variance and its derivative vanish
at a constant); the search's first step off them finds it. The correct translation stays
equivalent, searched. The same holds for a package function the test calls.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tern.verify.search import next_points, scaled_residual

TF_LAYERS = '''
import tensorflow as tf


class Center(tf.keras.layers.Layer):
    """Features centred and scaled to unit variance over the last axis, times a learnt gain."""

    def build(self, input_shape):
        self.gain = self.add_weight(name="gain", shape=(input_shape[-1],), initializer="ones")

    def call(self, x):
        centred = x - tf.reduce_mean(x, axis=-1, keepdims=True)
        return centred / tf.sqrt(tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True) + 1e-3) * self.gain


def standardize(x):
    """Rows scaled to unit root mean square (a package function, not a layer)."""
    return x / tf.sqrt(tf.reduce_mean(tf.square(x), axis=-1, keepdims=True) + 1e-3)


class Project(tf.keras.layers.Layer):
    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.dense = tf.keras.layers.Dense(units, activation="tanh")

    def call(self, x):
        return self.dense(x)
'''

TF_TEST = '''
import tensorflow as tf

from {package}.layers import Center, Project, standardize


def test_shapes():
    assert Center()(tf.ones((2, 6))).shape == (2, 6)
    assert standardize(tf.ones((2, 6))).shape == (2, 6)
    assert Project(3)(tf.ones((2, 6))).shape == (2, 3)
'''

JAX_LAYERS = '''
import flax.linen as nn
import jax.numpy as jnp


class Center(nn.Module):
    """Features centred and scaled to unit variance over the last axis, times a learnt gain."""

    @nn.compact
    def __call__(self, x):
        gain = self.param("gain", nn.initializers.ones, (x.shape[-1],))
        centred = x - jnp.mean(x, axis=-1, keepdims=True)
        return centred / jnp.sqrt(jnp.mean(jnp.square(centred), axis=-1, keepdims=True) + 1e-3) * gain


def standardize(x):
    """Rows scaled to unit root mean square (a package function, not a layer)."""
    return x / jnp.sqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + 1e-3)


class Project(nn.Module):
    units: int

    @nn.compact
    def __call__(self, x):
        return jnp.tanh(nn.Dense(self.units, kernel_init=nn.initializers.glorot_uniform(), name="dense")(x))
'''

JAX_TEST = '''
import jax
import jax.numpy as jnp

from {package}.layers import Center, Project


def test_shapes():
    assert Center().init_with_output(jax.random.key(0), jnp.ones((2, 6)))[0].shape == (2, 6)
'''

PYPROJECT = '''
[tool.tern.verify]
search_rounds = {rounds}
'''


def _package(root: Path, name: str, layers: str, test: str) -> Path:
    package = root / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "layers.py").write_text(layers)
    (package / "test_layers.py").write_text(test.format(package=name))
    return package


def _verify(project: Path, translated: Path, original: Path, *extra: str) -> dict:
    out = project / "report.json"
    run = subprocess.run([sys.executable, "-m", "tern", "verify", str(translated), "--original", str(original),
                          "--daemon", "never", "--json", str(out), *extra], cwd=project, capture_output=True, text=True,
                         timeout=600)
    assert out.exists(), run.stdout + run.stderr
    return json.loads(out.read_text())


def _inits(case: dict) -> list[dict]:
    return [c for c in case.get("compared", []) if c["name"].startswith("init of")]


def _cases(report: dict, target: str) -> list[dict]:
    return [c for package in report["packages"] for row in package["rows"] for c in row.get("cases", [])
            if c["target"] == target]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("search")
    (root / "pyproject.toml").write_text("[tool.tern.verify]\n")  # the default: searched, two rounds
    original = _package(root / "tf", "centering", TF_LAYERS, TF_TEST)
    return root, original


def test_a_correct_translation_is_searched_and_stays_equivalent(project):
    root, original = project
    translated = _package(root / "jax_ok", "centering", JAX_LAYERS, JAX_TEST)
    report = _verify(root, translated, original)
    (center,) = [c for c in _cases(report, "centering.layers:Center")]
    assert center["status"] == "match", center
    search = center["search"]
    assert search["judged"] > 0 and search["points"] > search["judged"]
    assert search["largest"]["ok"] and search["largest"]["used"] < 1e-3  # float64 both sides
    assert any("search" in p["name"] for p in center["probes"])
    # a package function is searched too
    (function,) = _cases(report, "centering.layers:standardize")
    assert function["status"] == "match" and function["search"]["judged"] > 0, function
    assert function["search"]["largest"]["ok"] and "not_searched" not in function["search"]
    assert report["modules"]["mismatch"] == 0 and report["modules"]["error"] == 0, report["modules"]


def test_a_wrong_axis_only_the_search_sees_is_a_mismatch_with_its_input_saved(project):
    root, original = project
    wrong = (JAX_LAYERS.replace("jnp.mean(jnp.square(centred), axis=-1", "jnp.mean(jnp.square(centred), axis=0")
             .replace("jnp.mean(jnp.square(x), axis=-1", "jnp.mean(jnp.square(x), axis=0"))
    translated = _package(root / "jax_axis", "centering", wrong, JAX_TEST)
    report = _verify(root, translated, original)
    (center,) = _cases(report, "centering.layers:Center")
    assert center["status"] == "mismatch", center
    fixed = [p for p in center["probes"] if "search" not in p["name"]]
    assert fixed and all(p["ok"] for p in fixed)  # every fixed probe agreed: the inputs were constant
    failed = [p for p in center["probes"] if not p["ok"]]
    assert failed and all("search" in p["name"] for p in failed)
    saved = Path(failed[0]["input"])
    assert saved.with_suffix(".json").exists() and ".tern/search-found" in str(saved)
    # the ascent climbs: along it the difference grows well beyond the first step's off the constants
    noise = max(p["max_abs"] for p in failed if "noise" in p["name"])
    assert max(p["max_abs"] for p in failed if "search 2" in p["name"]) > 2 * noise
    assert "search 2" in center["search"]["largest"]["name"]
    # the same bug in a package function: its fixed probes agree, the search's points do not,
    # and the ascent (jax.vjp on one side, a GradientTape on the other) climbs from there
    (function,) = _cases(report, "centering.layers:standardize")
    assert function["status"] == "mismatch", function
    assert all(p["ok"] for p in function["probes"] if "search" not in p["name"])
    failed = [p for p in function["probes"] if not p["ok"]]
    assert failed and all("search" in p["name"] for p in failed)
    assert any("search 2" in p["name"] for p in failed), [p["name"] for p in failed]
    (project_case,) = [c for c in _cases(report, "centering.layers:Project") if c.get("search")]
    assert project_case["status"] == "match"

    # a rerun (one round this time) judges the saved point first
    (root / "pyproject.toml").write_text(PYPROJECT.format(rounds=1))
    again = _verify(root, translated, original)
    (center,) = _cases(again, "centering.layers:Center")
    assert center["status"] == "mismatch"
    assert any(not p["ok"] and "search-found" in p.get("input", "") for p in center["probes"])

    # switched off, nothing beyond the fixed probes is judged: the bug goes through
    (root / "pyproject.toml").write_text(PYPROJECT.format(rounds=0))
    off = _verify(root, translated, original)
    (center,) = _cases(off, "centering.layers:Center")
    assert center["status"] == "match" and "search" not in center
    assert not any("search" in p["name"] for p in center["probes"])
    (root / "pyproject.toml").write_text("[tool.tern.verify]\n")
    # so does --no-search, whatever the config says (a quick check between edits)
    quick = _verify(root, translated, original, "--no-search")
    (center,) = _cases(quick, "centering.layers:Center")
    assert center["status"] == "match" and "search" not in center


def test_the_residual_is_scaled_by_the_tolerance_and_a_non_finite_value_is_infinitely_off():
    got, want = [np.array([1.0, 2.0]), np.array([5.0])], [np.array([1.0, 2.1]), np.array([5.0])]
    used, residual = scaled_residual(got, want, [0], {"rtol": 1e-5, "atol": 1e-5})
    assert used == pytest.approx(0.1 / (1e-5 + 2.1e-5))
    assert residual[1] is None and residual[0][0] == 0.0 and residual[0][1] < 0
    used, _ = scaled_residual([np.array([np.nan])], [np.array([1.0])], [0], None)
    assert used == float("inf")


def test_next_points_step_along_the_ascent_and_only_round_0_steps_around():
    x = [np.ones((2, 3))]
    first = next_points(0, x, [np.zeros((2, 3))])
    assert [name for name, _ in first] == ["search 1: x + 0.1 rms * noise"]  # flat ground: no ascent
    ascent = [np.arange(6.0).reshape(2, 3)]
    later = next_points(1, x, ascent)
    assert len(later) == 5 and all(name.startswith("search 2") for name, _ in later)
    _, moved = later[-1]  # the longest step: one rms of x along the direction's unit rms
    step = moved[0] - x[0]
    assert np.sqrt(np.mean(step**2)) == pytest.approx(1.0)
    assert np.allclose(step / np.linalg.norm(step), ascent[0] / np.linalg.norm(ascent[0]))


def test_through_the_daemon_an_edit_is_searched_afresh_and_later_rounds_reuse_the_built_translation(tmp_path):
    """What a search's rounds keep in the workers between jobs (``between_jobs.py``) is named
    by the translation's content: the wrong axis written over a correct translation, in the
    same file and through the same warm workers, is still found."""
    (tmp_path / "pyproject.toml").write_text("[tool.tern.verify]\n")
    original = _package(tmp_path / "tf", "centering", TF_LAYERS, TF_TEST)
    translated = _package(tmp_path / "jax", "centering", JAX_LAYERS, JAX_TEST)
    daemon = ("--daemon", "auto")
    try:
        first = _verify(tmp_path, translated, original, *daemon)
        (center,) = _cases(first, "centering.layers:Center")
        assert center["status"] == "match" and center["search"]["rounds"] == 2, center
        # the pool's affinity sent the later rounds where round 0 built the translation
        assert center["search"]["reused"] == 2, center["search"]
        assert "earlier" not in center["search"]
        layers = translated / "layers.py"
        # an edit that leaves what the module computes: the first round names the
        # computations, finds them searched, and the earlier results stand
        layers.write_text(JAX_LAYERS + "# reviewed\n")
        commented = _verify(tmp_path, translated, original, *daemon)
        for target in ("centering.layers:Center", "centering.layers:standardize"):
            (before,) = [c for c in _cases(first, target) if c.get("search")]
            (after,) = [c for c in _cases(commented, target) if c.get("search")]
            assert after["status"] == "match" and after["search"].get("earlier") is True, after["search"]
            assert after["search"]["largest"] == before["search"]["largest"]
            assert [p for p in after["probes"] if "search" in p["name"]] == [p for p in before["probes"] if "search" in p["name"]]
        # the initial weights' comparison too (``init_run.py``)
        (before,) = [c for c in _cases(first, "centering.layers:Project") if _inits(c)]
        (after,) = [c for c in _cases(commented, "centering.layers:Project") if _inits(c)]
        assert "init_earlier" not in before and after.get("init_earlier") is True and _inits(after) == _inits(before)
        # the wrong axis, and another initializer: each a computation of its own, found
        layers.write_text(JAX_LAYERS.replace("jnp.mean(jnp.square(centred), axis=-1", "jnp.mean(jnp.square(centred), axis=0")
                          .replace("glorot_uniform()", "lecun_normal()"))
        edited = _verify(tmp_path, translated, original, *daemon)
        (center,) = _cases(edited, "centering.layers:Center")
        assert center["status"] == "mismatch", center
        (project,) = [c for c in _cases(edited, "centering.layers:Project") if _inits(c)]
        assert project["status"] == "mismatch" and "init_earlier" not in project
        assert [c["name"] for c in _inits(project) if not c["ok"]] == ["init of dense/kernel"], _inits(project)
        assert any(not p["ok"] and "search" in p["name"] for p in center["probes"])
        assert center["search"]["reused"] == 2  # the edited translation, built in its own round 0
        assert "earlier" not in center["search"]  # another computation: searched in full
        layers.write_text(JAX_LAYERS)  # and back: equivalent again, at the saved point too
        back = _verify(tmp_path, translated, original, *daemon)
        (center,) = _cases(back, "centering.layers:Center")
        assert center["status"] == "match", center
        # the computation searched first, but with a saved point to judge now: searched again
        assert "earlier" not in center["search"] and center["search"]["judged"] > 0
        (project,) = [c for c in _cases(back, "centering.layers:Project") if _inits(c)]
        assert project["status"] == "match"  # the first run's text: its job's result, found in the cache
    finally:
        subprocess.run([sys.executable, "-m", "tern", "serve", "--stop", "--project", str(tmp_path)],
                       capture_output=True, timeout=120)
