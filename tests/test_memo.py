"""The daemon's kept translations (``tern/engine/memo.py``): a rerun through the memo writes
exactly what a fresh run writes, after every kind of edit, including an edit to one module
that changes how another is translated (the package facts)."""

from __future__ import annotations

import json
from pathlib import Path

from tern.engine.memo import TranslationMemo, package_digest
from tern.engine.package import scan_package
from tern.engine.runner import migrate

LAYER = "import tensorflow as tf\n\n\nclass Scale(tf.keras.layers.Layer):\n    def call(self, x):\n        return x * 2.0\n"
PLAIN = "import tensorflow as tf\n\n\nclass Scale:\n    def call(self, x):\n        return x * 2.0\n"
USE = ("import tensorflow as tf\n\nfrom pkg.layers import Scale\n\n\nclass Doubled(Scale):\n"
       "    def call(self, x):\n        return tf.nn.relu(super().call(x))\n")
TEST = ("import tensorflow as tf\n\nfrom pkg.use import Doubled\n\n\ndef test_doubled():\n"
        "    assert float(Doubled()(tf.ones([1]))[0]) == 2.0\n")


def package(root: Path) -> Path:
    src = root / "src" / "pkg"
    src.mkdir(parents=True)
    for name, text in {"__init__.py": "", "layers.py": LAYER, "use.py": USE, "use_test.py": TEST}.items():
        (src / name).write_text(text)
    return src


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def report_without_paths(report, out: Path) -> dict:
    data = json.loads(report.to_json())
    return json.loads(json.dumps(data).replace(str(out), "OUT"))


def test_a_rerun_through_the_memo_writes_what_a_fresh_run_writes(tmp_path):
    src = package(tmp_path)
    memo = TranslationMemo()
    edits = [
        ("nothing changed", None, None),
        ("a comment in the test", "use_test.py", TEST + "# checked by hand\n"),
        ("lines moved in another module", "layers.py", "\n\n" + LAYER),
        ("Scale is no Keras layer any more: use.py's translation changes", "layers.py", PLAIN),
        ("and a layer again", "layers.py", LAYER),
    ]
    use_outputs = set()
    for step, (what, name, text) in enumerate(edits):
        if name is not None:
            (src / name).write_text(text)
        kept = migrate(src, tmp_path / "kept" / "pkg", memo=memo)
        fresh = migrate(src, tmp_path / f"fresh{step}" / "pkg")
        assert tree(tmp_path / "kept" / "pkg") == tree(tmp_path / f"fresh{step}" / "pkg"), what
        assert report_without_paths(kept, tmp_path / "kept") == report_without_paths(fresh, tmp_path / f"fresh{step}"), what
        use_outputs.add((tmp_path / "kept" / "pkg" / "use.py").read_text())
    assert len(use_outputs) == 2  # the edit to layers.py did reach use.py's translation, and back
    assert memo.hits >= 4 + 3 + 3  # unchanged files were not translated again


def test_the_package_key_ignores_positions_but_not_structure(tmp_path):
    src = package(tmp_path)
    files = sorted(src.glob("*.py"))
    before = package_digest(scan_package(src, files))
    (src / "layers.py").write_text("\n\n\n" + LAYER)
    assert package_digest(scan_package(src, files)) == before
    (src / "layers.py").write_text(PLAIN)
    assert package_digest(scan_package(src, files)) != before


def test_an_answer_is_a_copy_the_caller_may_change(tmp_path):
    src = package(tmp_path)
    memo = TranslationMemo()
    first = migrate(src, tmp_path / "a" / "pkg", memo=memo)
    for f in first.files:
        f.edits.clear()
        f.todos.append("changed by the caller")
    again = migrate(src, tmp_path / "b" / "pkg", memo=memo)
    fresh = migrate(src, tmp_path / "c" / "pkg")
    assert [(f.path, f.edits, f.todos) for f in again.files] == [(f.path, f.edits, f.todos) for f in fresh.files]
    assert memo.hits == len(fresh.files)


def test_the_memo_forgets_the_least_recently_used_first():
    memo = TranslationMemo(capacity=2)
    made = []

    def compute(name):
        def run():
            made.append(name)
            from tern.engine.report import FileResult

            return FileResult(name, "unchanged"), None
        return run

    for key in ("a", "b", "a", "c", "a", "b"):
        memo.translate((key,), compute(key))
    assert made == ["a", "b", "c", "b"] and len(memo) == 2
    memo.translate(None, compute("d"))  # no key: never kept
    assert made[-1] == "d" and len(memo) == 2
