"""Code objects kept by source text (tern/verify/compiled.py): an unchanged file is not
compiled again, an edited one always is, and what runs is what the file now says."""

from __future__ import annotations

import sys

import pytest

from tern.verify import compiled
from tern.verify.files_run import files_run
from tern.verify.junit import run_pytest


@pytest.fixture
def made():
    """Per file of the package: how many times it was compiled."""
    compiled.forget()
    yield lambda root: {str(p.relative_to(root)): compiled.made[str(p)] for p in sorted(root.rglob("*.py"))}
    compiled.forget()


def _package(root, value: int, check: str = "== 2") -> None:
    (root / "pkg").mkdir(exist_ok=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "ops.py").write_text(f"def value():\n    return {value}\n")
    (root / "pkg" / "ops_test.py").write_text(
        "from pkg.ops import value\n\n\ndef test_value():\n    got = value()\n"
        f"    assert got {check}, 'the value'\n")


def _run(root, scratch):
    sys.path.insert(0, str(root))
    try:
        with files_run(root) as ran:
            result = run_pytest([str(root / "pkg" / "ops_test.py")], root, scratch, translated=False)
    finally:
        sys.path.remove(str(root))
        for name in ("pkg", "pkg.ops", "pkg.ops_test"):
            sys.modules.pop(name, None)
    return result, ran


def test_an_unchanged_package_is_not_compiled_again_and_an_edit_always_is(tmp_path, made):
    root, scratch = tmp_path / "src", tmp_path / "scratch"
    root.mkdir()
    scratch.mkdir()
    _package(root, 2)
    first, ran = _run(root, scratch)
    assert first["exit"] == 0 and root / "pkg" / "ops.py" in ran
    once = {"pkg/__init__.py": 1, "pkg/ops.py": 1, "pkg/ops_test.py": 1}  # marked, marked, rewritten
    assert made(root) == once
    again, _ = _run(root, scratch)
    assert again["exit"] == 0 and made(root) == once

    _package(root, 3)  # the module edited: compiled again, and the test sees the new value
    edited, _ = _run(root, scratch)
    assert made(root) == {**once, "pkg/ops.py": 2}
    outcome = next(iter(edited["tests"].values()))
    assert outcome.startswith("failure") and "the value" in outcome and "assert 3 == 2" in outcome

    _package(root, 3, check="== 3")  # the test file edited: rewritten again, assertions and all
    fixed, _ = _run(root, scratch)
    assert fixed["exit"] == 0 and made(root) == {**once, "pkg/ops.py": 2, "pkg/ops_test.py": 2}
