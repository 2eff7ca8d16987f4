"""Golden before/after cases of the programmatic rules and name resolution.

Each ``rules/structure/cases/*.toml`` and ``rules/testing/cases/*.toml`` file holds
``[[case]]`` records (hits, near misses, no-ops). A case passes when the translation of
``before`` is exactly ``after`` and translating ``after`` again changes nothing. Support
definitions are imported (``from _keras_compat import ...``), so ``after`` shows only the
file's own code.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tern.engine.translate import translate_source

RULES = Path(__file__).resolve().parents[1] / "rules"
CASES = [
    (f"{path.parent.parent.name}/{path.stem}:{case['name']}", case)
    for family in ("structure", "testing")
    for path in sorted((RULES / family / "cases").glob("*.toml"))
    for case in tomllib.loads(path.read_text())["case"]
]


def translated(case: dict, source: str | None = None) -> str:
    """The case's translation, as its ``after`` states it."""
    return translate_source(case["before"] if source is None else source, is_test=case.get("is_test", False)).code


@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[i for i, _ in CASES])
def test_case(case):
    code = translated(case)
    assert code == case["after"], "if the change is intended: python tests/regen_rule_cases.py"
    assert translated(case, code) == code, "not idempotent"


@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[i for i, _ in CASES])
def test_todos_are_reported_where_they_stand(case):
    result = translate_source(case["before"], is_test=case.get("is_test", False))
    lines = result.code.splitlines()
    assert len(result.todos) == sum("# TODO(tern):" in line for line in lines)
    for todo in result.todos:
        assert "TODO(tern)" in lines[todo.line - 2]
        assert todo.construct and todo.reason


def test_enough_cases_per_family():
    families = {i.split(":")[0] for i, _ in CASES}
    assert {"structure/names", "structure/keras_class", "structure/functional_model", "structure/sequential",
            "structure/tf_function", "testing/assertions"} <= families
