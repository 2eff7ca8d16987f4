"""``FileContext.mentions`` lets rules skip walks when the file's text spells none of the words
they look for. It must only ever skip work: every fixture, and the aliasing cases below, must
translate exactly as they do when every word is taken as mentioned."""

from __future__ import annotations

from pathlib import Path

import pytest

from tern.engine.context import FileContext
from tern.engine.records import tables
from tern.engine.translate import translate_source

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted((ROOT / "fixtures" / "tf").rglob("*.py"))

ALIASED = {
    "input_alias.py": (
        "from keras import Input as I, Model\nfrom keras import layers\n\n"
        "def build():\n    x = I((4,))\n    return Model(x, layers.Dense(2)(x))\n"),
    "stray_input_test.py": (
        "import tensorflow as tf\nfrom tensorflow.keras import Input as In\n\n"
        "def test_symbolic():\n    x = In((3,))\n    assert x.shape[1] == 3\n"),
    "float64_alias.py": (
        "import tensorflow as tf\nfrom tensorflow import float64 as wide\n\n"
        "def norm(x):\n    return tf.cast(x, wide)\n"),
    "trainable.py": (
        "import tensorflow as tf\n\n"
        "def freeze(model):\n    for layer in model.layers:\n        layer.trainable = False\n"),
}


def _both(monkeypatch, source: str, name: str):
    quick = translate_source(source, is_test=name.endswith("_test.py"))
    with monkeypatch.context() as patch:
        patch.setattr(FileContext, "mentions", lambda self, *words: True)
        full = translate_source(source, is_test=name.endswith("_test.py"))
    return quick, full


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT / "fixtures" / "tf")))
def test_fixtures_translate_as_without_the_shortcut(monkeypatch, path):
    quick, full = _both(monkeypatch, path.read_text(encoding="utf-8"), path.name)
    assert quick.code == full.code
    assert quick.todos == full.todos and quick.edits == full.edits


@pytest.mark.parametrize("name", sorted(ALIASED))
def test_aliases_translate_as_without_the_shortcut(monkeypatch, name):
    quick, full = _both(monkeypatch, ALIASED[name], name)
    assert quick.code == full.code and quick.todos == full.todos


def test_canonical_spellings_keep_a_symbols_last_part():
    """What ``mentions`` (and the attribute shortcut of functional_model's ``_calls_in``) rest
    on: a prefix the tables respell changes a last part only where it names a package."""
    for prefix, canonical in tables().canonical:
        if prefix.rsplit(".", 1)[-1] != canonical.rsplit(".", 1)[-1]:
            assert canonical in ("tensorflow", "keras"), (prefix, canonical)


def test_unknown_and_non_ascii_texts_mention_everything():
    def ctx(source):
        return FileContext(tables=None, package=None, scopes=None, plan=None, is_test=False, source=source)
    assert ctx(None).mentions("Input")
    assert ctx("x = 1\n").mentions("x") and not ctx("x = 1\n").mentions("Input")
    assert ctx("ｘ = 1\n").mentions("Input")  # identifiers fold under NFKC: no proof from the text
