"""Defaults of every top-level package function, compared from the two sources
(``tern/verify/static_defaults.py``): what a function the tests never record still declares."""

from __future__ import annotations

from pathlib import Path

import pytest

from tern.status import Status
from tern.verify.record import package_modules
from tern.verify.report import build_rows
from tern.verify.static_defaults import static_default_checks

ROOT = Path(__file__).resolve().parents[1]

ORIGINAL = '''
import tensorflow as tf

def fit_with_early_stopping(model, data, epochs=20, learning_rate=0.1, patience=3, monitor="val_loss", *, verbose=True):
    return model

def schedule(step, warmup=(10, 20), training=None, initializer=tf.keras.initializers.GlorotUniform()):
    return step

def only_in_tf(x, scale=2.0):
    return x

def recorded(x, eps=1e-7):
    return x
'''

TRANSLATED = '''
import jax
import optax

def fit_with_early_stopping(state, data, epochs=20, learning_rate=0.2, patience=3, monitor="VAL_LOSS", *, verbose=False):
    return state

def schedule(step, warmup=[10, 20], training=False, initializer=jax.nn.initializers.glorot_uniform()):
    return step

def recorded(x, eps=1e-5):
    return x

def only_in_jax(x, scale=3.0):
    return x
'''


def _package(root: Path, text: str) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "train.py").write_text(text)
    return root / "pkg"


def test_literal_defaults_of_one_name_are_compared_and_the_rest_is_not(tmp_path):
    original, translated = _package(tmp_path / "tf", ORIGINAL), _package(tmp_path / "jax", TRANSLATED)
    checks = static_default_checks(original, translated, ["pkg", "pkg.train"], replayed={"pkg.train:recorded"})
    by_name = {c["name"]: c for c in checks["pkg.train"]}
    assert set(by_name) == {  # model/state, initializer (a call), only_in_*, recorded (a replay's): not compared
        "default of epochs (fit_with_early_stopping)", "default of learning_rate (fit_with_early_stopping)",
        "default of patience (fit_with_early_stopping)", "default of monitor (fit_with_early_stopping)",
        "default of verbose (fit_with_early_stopping)", "default of warmup (schedule)", "default of training (schedule)",
    }
    assert sorted(name for name, c in by_name.items() if not c["ok"]) == [
        "default of learning_rate (fit_with_early_stopping)", "default of verbose (fit_with_early_stopping)"]
    assert by_name["default of learning_rate (fit_with_early_stopping)"]["problem"] == "0.2 in the translation, TF has 0.1"
    # strings up to case, a tuple written as a list, Keras's training=None as Flax's False: alike
    assert by_name["default of monitor (fit_with_early_stopping)"]["ok"]
    assert by_name["default of warmup (schedule)"]["ok"] and by_name["default of training (schedule)"]["ok"]


def test_a_different_default_makes_its_module_a_mismatch_and_agreement_alone_proves_nothing(tmp_path):
    original, translated = _package(tmp_path / "tf", ORIGINAL), _package(tmp_path / "jax", TRANSLATED)
    checks = static_default_checks(original, translated, ["pkg", "pkg.train"])
    rows = {r.module: r for r in build_rows("pkg", ["pkg", "pkg.train"], {}, {}, {}, None, defaults=checks)}
    assert rows["pkg.train"].status == Status.MISMATCH
    assert "mismatch: default of learning_rate (fit_with_early_stopping): 0.2 in the translation, TF has 0.1" \
        in rows["pkg.train"].problems
    agreeing = {"pkg.train": [c for c in checks["pkg.train"] if c["ok"]]}
    rows = {r.module: r for r in build_rows("pkg", ["pkg", "pkg.train"], {}, {}, {}, None, defaults=agreeing)}
    assert rows["pkg.train"].status == Status.UNTESTED and rows["pkg.train"].defaults_compared == 5


def test_a_function_replayed_only_as_a_training_configuration_keeps_its_defaults_compared(tmp_path):
    """A configuration case compares what the function returns, not its signature, and fails
    on a stand-in model where the function needs more of it (``fit_with_early_stopping``):
    only cases that compared defaults leave a function to the replay."""
    from tern.verify.static_defaults import compared_by_replay

    cases = [{"target": "pkg.train:fit_with_early_stopping", "status": "not compared", "outputs": []},
             {"target": "pkg.train:recorded", "status": "match", "interface": []}]
    replayed = compared_by_replay(cases)
    assert replayed == {"pkg.train:recorded"}
    original, translated = _package(tmp_path / "tf", ORIGINAL), _package(tmp_path / "jax", TRANSLATED)
    checks = static_default_checks(original, translated, ["pkg", "pkg.train"], replayed=replayed)
    failed = [c["name"] for c in checks["pkg.train"] if not c["ok"]]
    assert "default of learning_rate (fit_with_early_stopping)" in failed


def test_a_classes_methods_are_compared_by_class_and_method_name(tmp_path):
    """A schedule the package defines keeps its ``__init__``; a layer's becomes Flax fields,
    which a replay compares (so a replayed class is left to it)."""
    original = _package(tmp_path / "tf", "class Warmup:\n    def __init__(self, peak, alpha=0.0, steps=(5,)):\n"
                                         "        pass\n\nclass Dense:\n    def __init__(self, units=32):\n        pass\n")
    translated = _package(tmp_path / "jax", "class Warmup:\n    def __init__(self, peak, alpha=0.1, steps=[5]):\n"
                                            "        pass\n\nclass Dense:\n    def __init__(self, units=33):\n        pass\n")
    checks = static_default_checks(original, translated, ["pkg.train"], replayed={"pkg.train:Dense"})
    assert [(c["name"], c["ok"]) for c in checks["pkg.train"]] == [
        ("default of alpha (Warmup.__init__)", False), ("default of steps (Warmup.__init__)", True)]


def test_unreadable_and_missing_files_compare_nothing(tmp_path):
    original = _package(tmp_path / "tf", ORIGINAL)
    translated = _package(tmp_path / "jax", "def broken(:\n")
    assert static_default_checks(original, translated, ["pkg.train", "pkg.gone"]) == {}


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "fixtures" / "expected").iterdir()
                                        if (p / "__init__.py").exists()))
def test_the_golden_translations_keep_every_literal_default(name):
    """No false finding: tern's own translations of the fixtures declare the defaults their
    TF sources declare (144 compared over the fixtures on 5 December 2026)."""
    checks = static_default_checks(ROOT / "fixtures" / "tf" / name, ROOT / "fixtures" / "expected" / name,
                                   package_modules(ROOT / "fixtures" / "expected", name))
    assert [c for found in checks.values() for c in found if not c["ok"]] == []
