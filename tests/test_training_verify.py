"""Training-step verification: the translated step trains like the original, step by step.

``training_data/tf/steps_pkg`` is a small Keras package whose tests call a ``GradientTape``
step four ways: Adam on four batches (compared over calls 1-3), SGD with momentum on a
BatchNormalization model through the package's own loop with two batches (call 1
repeated), SGD on a model with dropout (compared with Keras's dropout masks injected) and
an optimizer that already stepped (not compared). ``training_data/jax/steps_pkg`` is its translation, fixed; the mistake variant
drops the loss's logits penalty. One project and one daemon serve the module; the original
is recorded once. ``test_the_live_migrate_output_trains_like_the_original`` runs the same
check on what ``tern migrate`` produces today.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import anyio
import numpy as np
import pytest

from tern.evaluation.score import CaseResult, Translation, score
from tern.sandbox.jobs import JobResult
from tern.verify.cache import Cache
from tern.verify.config import ConfigError, VerifyConfig, load_config
from tern.verify.report import ModuleRow, PackageReport, to_markdown
from tern.verify.run import PackageVerifier, link_root
from tern.verify.passes import MAX_BYTES, RecordingPasses, ReplayedPasses
from tern.verify.step_find import find_steps
from tern.verify.step_objects import NotRenderable, render

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "training_data"
ORIGINAL = DATA / "tf" / "steps_pkg"
TRANSLATED = DATA / "jax" / "steps_pkg"
PENALTY = " + 0.01 * jnp.mean(jnp.square(logits))"


def tern(project: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tern", *args], capture_output=True, text=True, cwd=project,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("training")
    (root / "pyproject.toml").write_text("[project]\nname = 'training-verify-tests'\n")
    shutil.copytree(TRANSLATED, root / "right" / "steps_pkg", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(TRANSLATED, root / "wrong" / "steps_pkg", ignore=shutil.ignore_patterns("__pycache__"))
    step = root / "wrong" / "steps_pkg" / "train.py"
    assert PENALTY in step.read_text()
    step.write_text(step.read_text().replace(PENALTY, ""))  # the deliberate mistake: a loss term dropped
    yield root
    tern(root, "serve", "--stop", "--project", str(root), timeout=120)


def verify(project: Path, which: str) -> tuple[subprocess.CompletedProcess, dict]:
    report = project / f"{which}.json"
    proc = tern(project, "verify", str(project / which / "steps_pkg"), "--original", str(ORIGINAL), "--json", str(report))
    assert report.exists(), proc.stdout + proc.stderr
    return proc, json.loads(report.read_text())["packages"][0]


@pytest.fixture(scope="module")
def right(project):
    return verify(project, "right")


@pytest.fixture(scope="module")
def wrong(project, right):
    return verify(project, "wrong")


def target(package: dict, function: str) -> dict:
    return next(item for item in package["training"]["steps"] if item["function"] == function)


def sessions(package: dict) -> dict[str, dict]:
    """The step's compared sessions by optimizer class, ``+draws`` for the one that drew (the dropout model)."""
    step = target(package, "train_step")
    assert {item["function"] for item in package["training"]["steps"]} == {"train_step", "train"}
    return {s["optimizer"].split("(")[0].rsplit(".", 1)[-1] + ("+draws" if "draws injected" in s.get("note", "") else ""): s
            for s in step["sessions"]}


def row(package: dict, module: str) -> dict:
    return next(r for r in package["rows"] if r["module"] == module)


# -- through the sandbox --------------------------------------------------------------


def test_the_translated_step_trains_like_the_original(right):
    proc, package = right
    assert package["training"]["status"] == "equivalent", proc.stdout
    found = sessions(package)
    assert set(found) == {"Adam", "SGD", "SGD+draws"}
    adam, sgd, dropout = found["Adam"], found["SGD"], found["SGD+draws"]
    assert adam["batches"] == "calls 1-3 of the test"
    assert sgd["batches"] == "call 1's arguments repeated 3 times (the test made 2 call(s))"
    assert dropout["note"] == "TF's random draws injected into the translation (3 over 3 steps)"  # a mask per step
    for session in (adam, sgd, dropout):
        assert session["status"] == "equivalent" and session["compared"] == session["steps"] == 3
        assert (session["rtol"], session["atol"]) == (1e-5, 1e-6)
        assert session["loss"]["max_abs"] <= 1e-5 and session["params"]["max_abs"] <= 1e-5
    (loop,) = target(package, "train")["sessions"]  # the package's own loop, replayed as one call: 2 updates
    assert loop["status"] == "equivalent" and loop["loop"] and loop["updates"] == 2
    assert loop["batches"] == "the test's first call (its own steps inside)"
    assert (loop["rtol"], loop["atol"]) == (2e-5, 2e-6)  # the per-step tolerance x its 2 updates
    train = row(package, "steps_pkg.train")
    assert train["status"] == "equivalent" and train["train_matched"] == train["train_total"] == 4
    assert "training equivalent, 3/3 steps compared" in proc.stdout and proc.returncode == 0
    assert "steps_pkg.train:train: training equivalent, loop compared after its 2 updates" in proc.stdout


def test_an_optimizer_that_already_stepped_is_not_compared(right):
    _, package = right
    reasons = target(package, "train_step")["not_compared"]
    assert reasons == {"the optimizer had already taken 1 step(s) at the first call seen (iterations = 1)": 1}


def test_a_wrong_step_is_named_by_its_first_divergent_step_and_parameter(wrong):
    proc, package = wrong
    assert package["training"]["status"] == "mismatch" and proc.returncode == 1
    train = row(package, "steps_pkg.train")
    assert train["status"] == "mismatch" and train["train_matched"] == 0 and train["train_total"] == 4
    (loop,) = target(package, "train")["sessions"]  # the loop returns the losses of the wrong step
    assert loop["status"] == "mismatch" and loop["divergence"]["returned"]["name"] == "returned value[0]"
    assert "mismatch: training step steps_pkg.train:train: after the loop's 2 updates" in proc.stdout
    for session in sessions(package).values():
        divergence = session["divergence"]
        assert session["status"] == "mismatch" and divergence["step"] == 1
        returned = divergence["returned"]  # the dropped penalty is in the loss from the first step
        assert returned["jax_value"] < returned["keras_value"] and returned["max_abs"] > 1e-4
        parameter = divergence["parameter"]
        assert parameter["name"].startswith("params/") and parameter["keras"] not in ("", "?")
        assert parameter["name"].rsplit("/", 1)[-1] == {"gamma": "scale", "beta": "bias"}.get(
            parameter["keras"].rsplit("/", 1)[-1], parameter["keras"].rsplit("/", 1)[-1])
        assert abs(parameter["jax_value"] - parameter["keras_value"]) > 1e-6
    # plain SGD passes a gradient difference straight to the parameters
    assert sessions(package)["SGD"]["divergence"]["parameter"]["step"] == 1
    assert "mismatch: training step steps_pkg.train:train_step: step 1 of 3" in proc.stdout
    assert any(p.startswith("mismatch: training step") for p in train["problems"])


GAN = "interpolated = real + alpha * (fake - real)"


@pytest.mark.parametrize("interpolation,status", [
    (GAN, "equivalent"),
    ("interpolated = fake + alpha * (fake - real)", "mismatch"),  # the gradient penalty at the wrong points
], ids=["translated", "wrong_interpolation"])
def test_a_gan_step_over_two_states_replays_with_kerass_draws(project, interpolation, status):
    """``gan_pkg``'s step updates a critic and a generator, each with its Adam, and draws noise
    and the penalty's interpolation weights from tf.random: Keras's draws are injected into
    the translation, so its two states must follow Keras's two models exactly. Its test only
    checks that both networks moved: a wrong interpolation passes it, not the replay."""
    out = project / f"gan_{zlib.crc32(interpolation.encode())}" / "gan_pkg"
    shutil.copytree(DATA / "jax" / "gan_pkg", out, ignore=shutil.ignore_patterns("__pycache__"))
    step = out / "train.py"
    assert step.read_text().count(GAN) == 1
    step.write_text(step.read_text().replace(GAN, interpolation))
    report = out.parent / "report.json"
    proc = tern(project, "verify", str(out), "--original", str(DATA / "tf" / "gan_pkg"), "--json", str(report))
    package = json.loads(report.read_text())["packages"][0]
    (item,) = package["training"]["steps"]
    (session,) = item["sessions"]
    assert session["status"] == status, proc.stdout
    assert session["compared"] == 3 and "random draws injected" in session["note"], session
    assert session["optimizer"].count("Adam(") == 2
    if status == "mismatch":
        assert session["divergence"]["step"] == 1 and proc.returncode == 1
        assert session["divergence"]["parameter"]["name"].startswith(("critic: ", "generator: "))
    else:
        assert session["params"]["max_abs"] <= 1e-5 and proc.returncode == 0


def test_reports_and_eval_carry_the_training_status(right, wrong):
    for (_, package), status in ((right, "equivalent"), (wrong, "mismatch")):
        fields = {k: v for k, v in package.items() if k != "status"}
        text = to_markdown([PackageReport(**{**fields, "rows": [ModuleRow(**r) for r in package["rows"]]})])
        assert f"### Training steps: {status}" in text and "| `steps_pkg.train:train_step` | 3 |" in text
        case = score(CaseResult(id="c", suite="s", name="steps_pkg", kind="translation", source="", original="", out=""),
                     Translation(), package)
        assert case.training == status


def test_the_live_migrate_output_trains_like_the_original(project, right):
    """End to end: the GradientTape rule's output (not the fixed translation) is verified."""
    out = project / "migrated" / "steps_pkg"
    tern(project, "migrate", str(ORIGINAL), "--out", str(out), "-q")
    assert (out / "train.py").is_file()
    proc, package = verify(project, "migrated")
    assert package["training"]["status"] == "equivalent", proc.stdout
    assert {s["status"] for s in sessions(package).values()} == {"equivalent"} and len(sessions(package)) == 3
    assert [s["status"] for s in target(package, "train")["sessions"]] == ["equivalent"]


# -- without the sandbox ----------------------------------------------------------------


def test_steps_are_the_functions_tern_translates_as_steps():
    source = (ORIGINAL / "train.py").read_text()
    step, loop = find_steps(source)
    assert (step.name, step.model, step.optimizer, step.unsupported) == ("train_step", "model", "optimizer", "")
    assert step.params == ("model", "optimizer", "loss_fn", "x", "y")
    assert step.pairs == (("model", "optimizer"),) and not step.draws and not step.loop
    # the loop around it: replayed as one call; its batches are only iterated, so a list can stand in for them
    assert (loop.name, loop.loop, loop.pairs, loop.iterated) == ("train", True, (("model", "optimizer"),), ("batches",))
    gan = (ROOT / "fixtures" / "tf" / "train_wgan_gp" / "train.py").read_text()
    multi, gan_loop = find_steps(gan)  # two train states; its draws, in the step and in gradient_penalty, are found
    assert multi.unsupported == "" and multi.draws
    assert multi.pairs == (("generator", "generator_optimizer"), ("critic", "critic_optimizer"))
    assert gan_loop.loop and gan_loop.pairs == multi.pairs and gan_loop.draws and gan_loop.iterated == ("dataset",)
    taken = gan.replace("for real in dataset:", "for real in dataset.take(8):")
    assert "dataset.take(8)" in taken and find_steps(taken)[1].iterated == ()  # a method call on it: a list would not do
    quiet, _ = find_steps(gan.replace("tf.random.uniform([batch_size, 1], 0.0, 1.0)", "0.5").replace(
        "tf.random.normal([batch_size, LATENT_DIM])", "tf.ones([batch_size, LATENT_DIM])"))
    assert not quiet.draws
    (left,) = find_steps(gan.replace("critic_optimizer.apply_gradients(zip(c_grads, critic.trainable_variables))",
                                     "generator_optimizer.apply_gradients(zip(c_grads, critic.trainable_variables))"))
    assert left.unsupported == ("tern leaves this step as written: a model updated by two optimizers, or an optimizer "
                                "updating two models: not translated")
    assert find_steps("def f(model, x):\n    return model(x)\n") == []


class _Reshuffled:
    """A dataset in the way a reshuffling tf.data pipeline is one: every pass another order."""

    def __init__(self, n: int):
        self.n, self.passes = n, 0

    def __iter__(self):
        self.passes += 1
        order = np.random.default_rng(self.passes).permutation(self.n)
        return iter([(np.float32(i), np.int32(i % 2)) for i in order])


def test_a_loops_dataset_is_recorded_pass_by_pass_and_replayed_in_that_order():
    recording = RecordingPasses(_Reshuffled(6), to_numpy=lambda e: e, nbytes=lambda e: 8)
    seen = [list(recording) for _ in range(3)]  # the loop sees the dataset's own elements
    assert seen[0] != seen[1] and recording.passes == seen and not recording.overflow
    replayed = ReplayedPasses(recording.passes, lambda e: (float(e[0]), int(e[1])))
    assert [list(replayed) for _ in range(3)] == [[(float(x), int(y)) for x, y in p] for p in seen]
    with pytest.raises(RuntimeError, match="iterates its dataset a 4th time; the original made 3 pass"):
        iter(replayed)
    big = RecordingPasses(_Reshuffled(6), to_numpy=lambda e: e, nbytes=lambda e: MAX_BYTES // 4)
    assert len(list(big)) == 6 and big.overflow  # past the cap: still every element for the loop, nothing claimed


def test_keras_objects_render_from_their_non_default_config():
    assert render("optimizer", "Adam", {"name": "adam", "learning_rate": 0.05000000074505806, "beta_1": 0.9},
                  {"learning_rate": 0.001, "beta_1": 0.9}) == "tf.keras.optimizers.Adam(learning_rate=0.05000000074505806)"
    schedule = {"module": "keras.optimizers.schedules", "class_name": "ExponentialDecay", "registered_name": None,
                "config": {"initial_learning_rate": 0.1, "decay_steps": 4, "decay_rate": 0.5, "staircase": False, "name": "x"}}
    assert render("optimizer", "SGD", {"learning_rate": schedule, "momentum": 0.9}, {"momentum": 0.0}) == (
        "tf.keras.optimizers.SGD(learning_rate=tf.keras.optimizers.schedules.ExponentialDecay(initial_learning_rate=0.1, "
        "decay_steps=4, decay_rate=0.5, staircase=False), momentum=0.9)")
    with pytest.raises(NotRenderable, match="not a Keras built-in schedule"):
        render("optimizer", "Adam", {"learning_rate": {**schedule, "module": "mypkg.schedules", "class_name": "Warmup"}}, {})


def test_training_settings_come_from_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.tern.verify.training]\nsteps = 5\nrtol = 1e-4\n")
    config = load_config(tmp_path)
    assert config.train_steps == 5 and config.train_tolerance() == {"rtol": 1e-4, "atol": 1e-6}
    assert VerifyConfig().train_steps == 3 and VerifyConfig().train_tolerance() == {"rtol": 1e-5, "atol": 1e-6}
    (tmp_path / "pyproject.toml").write_text("[tool.tern.verify.training]\nsteps = 0\n")
    with pytest.raises(ConfigError, match="steps must be a positive integer"):
        load_config(tmp_path)


class CountingRunner:
    def __init__(self):
        self.jobs = []

    async def run(self, job):
        self.jobs.append(job)
        return JobResult("ok", value={"steps": []}, seconds=0.0)


def test_training_results_are_cached_and_keyed_on_the_modules_the_step_uses(tmp_path):
    translated = tmp_path / "jax" / "steps_pkg"
    shutil.copytree(TRANSLATED, translated)
    runner, cache = CountingRunner(), Cache(tmp_path / ".tern")
    verifier = PackageVerifier(ORIGINAL, translated, runner=runner, cache=cache, config=VerifyConfig())
    jax_root = link_root(cache.state_dir, translated, "steps_pkg")
    cases = [{"id": "step-1", "target": "steps_pkg.train:train_step", "origin_module": "steps_pkg.model"}]

    def train(recording: str = "rec-a") -> bool:
        return anyio.run(lambda: verifier.train("steps_pkg.train", cases, str(tmp_path / recording), jax_root)).cached

    assert train() is False and train() is True and len(runner.jobs) == 1  # the second run is a cache hit
    (translated / "model.py").write_text((translated / "model.py").read_text() + "\n# an edit\n")
    assert train() is False  # the model's module is part of the key, though train.py does not import it
    assert train("rec-b") is False  # so is the recording
    verifier.config = VerifyConfig(train_rtol=1e-4)
    assert train("rec-b") is False and len(runner.jobs) == 4  # and the tolerance
    assert runner.jobs[0].task == "tern.verify.tasks:replay_steps" and runner.jobs[0].kind == "jax"
    cache.close()


def test_fit_on_a_package_model_is_noted_as_not_compared(tmp_path):
    """Training through Keras fit is not replayed: the recorder names the module and the model's class,
    from a call in the module's tests, and leaves Keras' fit as it found it."""
    import types

    import keras
    import numpy as np

    from tern.verify.step_record import FIT_NOT_COMPARED, StepRecorder

    module = types.ModuleType("pkg.model")
    before = keras.Model.fit
    recorder = StepRecorder(tmp_path)
    recorder.install([module])
    try:
        test_globals = {"__name__": "pkg.model_test", "keras": keras, "np": np}
        exec("def test_fit():\n"  # noqa: S102 - a test function of a module named like a package's tests
             "    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])\n"
             "    model.compile(optimizer='sgd', loss='mse')\n"
             "    return model.fit(np.ones((4, 2)), np.zeros((4, 1)), epochs=1, verbose=0)\n", test_globals)
        history = test_globals["test_fit"]()
    finally:
        recorder.close()
    assert len(history.history["loss"]) == 1  # the test saw Keras' own fit
    assert recorder.not_compared == {"pkg.model:Sequential.fit": {FIT_NOT_COMPARED: 1}}
    assert keras.Model.fit is before and "fit" not in vars(keras.Model)
