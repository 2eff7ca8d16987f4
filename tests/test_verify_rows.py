"""Which module a translated test counts for (tern/verify/report.py, record.py) and which
modules owe verification anything (tern/evaluation/scan.py): pure functions, no sandbox."""

from types import SimpleNamespace

import pytest

from tern.evaluation.scan import code_modules
from tern.verify.record import imported_modules
from tern.verify.report import build_rows

MODULES = ["pkg", "pkg.match_majority_vote", "pkg.f1_score", "pkg.recall", "pkg.types"]


def _tests(outcome: str) -> tuple:
    return ({"tests": {"t::a": outcome, "t::b": "passed"}, "exit": 0}, None, False)


def _rows(tests: dict, imports: dict) -> dict:
    return {r.module: r for r in build_rows("pkg", MODULES, {}, tests, {}, None, None, imports)}


def test_a_test_named_after_no_module_counts_for_the_module_it_imports_by_name():
    rows = _rows({"test_majority_vote.py": _tests("passed")},
                 {"test_majority_vote.py": ["pkg.match_majority_vote", "pkg.types"]})
    assert rows["pkg.match_majority_vote"].tests_passed == 2
    assert rows["pkg.match_majority_vote"].status == "equivalent"
    assert "pkg.test_majority_vote" not in rows


def test_a_test_of_several_modules_keeps_its_row_and_covers_each_once():
    rows = _rows({"test_metrics.py": _tests("passed")}, {"test_metrics.py": ["pkg.f1_score", "pkg.recall"]})
    assert rows["pkg.test_metrics"].tests_total == 2  # counted once, on the test's own row
    assert rows["pkg.f1_score"].status == rows["pkg.recall"].status == "equivalent"
    assert rows["pkg.f1_score"].tests_total == 0 and rows["pkg.f1_score"].covered_by == ["test_metrics.py"]


def test_a_failing_covering_test_makes_the_covered_modules_mismatch_with_a_reason():
    rows = _rows({"test_metrics.py": _tests("failure: AssertionError")}, {"test_metrics.py": ["pkg.f1_score", "pkg.recall"]})
    assert rows["pkg.f1_score"].status == "mismatch"
    assert any("test_metrics.py" in p for p in rows["pkg.f1_score"].problems)


def test_imports_are_read_absolute_relative_and_as_from_package_import_module(tmp_path):
    (tmp_path / "pkg").mkdir()
    test = tmp_path / "pkg" / "test_x.py"
    test.write_text("from .recall import Recall\nfrom pkg import f1_score\nimport numpy as np\nfrom . import types\n")
    assert imported_modules(test, tmp_path, "pkg", MODULES) == ["pkg.recall", "pkg.f1_score", "pkg.types"]


def test_marker_classes_and_field_records_owe_nothing(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "types.py").write_text("class FloatTensor(object):\n    '''A float tensor.'''\n\n\n"
                                                "class Lookup:\n    rank: int\n    distance: float = 0.0\n")
    (tmp_path / "pkg" / "ops.py").write_text("class Scale:\n    def __call__(self, x):\n        return 2 * x\n")
    (tmp_path / "pkg" / "fn.py").write_text("def f(x):\n    return x\n")
    assert code_modules(tmp_path / "pkg", "pkg") == {"pkg.ops", "pkg.fn"}


def test_rows_without_imports_behave_as_before():
    rows = {r.module: r for r in build_rows("pkg", MODULES, {}, {"test_other.py": _tests("passed")}, {}, SimpleNamespace(cause="x"), None)}
    assert rows["pkg.test_other"].tests_passed == 2


def _replay(*cases: tuple[str, list[str]]) -> tuple:
    """A replay job's value: one case per (status, modules whose Flax modules ran)."""
    return ({"import_error": "", "cases": [
        {"target": f"pkg.f1_score:Model{i}", "id": str(i), "status": status, "ran": ran,
         "outputs": [{"name": "y", "ok": status == "match", "max_abs": 0.0, "max_rel": 0.0, "rtol": 1e-5, "atol": 1e-5}], "gradients": []}
        for i, (status, ran) in enumerate(cases)]}, None, False)


def test_a_helper_module_whose_layers_ran_in_matching_replays_is_equivalent():
    replays = {"pkg.f1_score": _replay(("match", ["pkg.f1_score", "pkg.recall", "flax.linen.linear"]))}
    rows = {r.module: r for r in build_rows("pkg", MODULES, replays, {}, {}, None, None, {})}
    assert rows["pkg.recall"].status == "equivalent"
    assert rows["pkg.recall"].covered_by == ["pkg.f1_score:Model0 (replayed)"]
    assert rows["pkg.types"].status == "untested"  # nothing of it ran


def test_a_helper_module_in_a_mismatching_replay_is_not_credited():
    replays = {"pkg.f1_score": _replay(("match", ["pkg.recall"]), ("mismatch", ["pkg.recall"]))}
    rows = {r.module: r for r in build_rows("pkg", MODULES, replays, {}, {}, None, None, {})}
    assert rows["pkg.f1_score"].status == "mismatch"
    assert rows["pkg.recall"].status == "untested" and not rows["pkg.recall"].covered_by


def _tests_running(outcome: str, ran: list[str]) -> tuple:
    return ({"tests": {"t::a": outcome}, "exit": 0, "ran": ran}, None, False)


def test_a_module_whose_code_the_passing_tests_ran_is_equivalent():
    tests = {"pkg/test_recall.py": _tests_running("passed", ["pkg.recall", "pkg.types"])}
    rows = {r.module: r for r in build_rows("pkg", MODULES, {}, tests, {}, None, None, {"pkg/test_recall.py": ["pkg.recall"]})}
    assert rows["pkg.recall"].tests_passed == 1  # its own test
    assert rows["pkg.types"].status == "equivalent"
    assert rows["pkg.types"].covered_by == ["pkg/test_recall.py (ran its code)"]
    assert rows["pkg.f1_score"].status == "untested"  # imported by nothing, run by nothing


def test_a_module_run_by_a_failing_test_is_not_credited():
    tests = {"pkg/test_recall.py": _tests_running("failure: AssertionError", ["pkg.recall", "pkg.types"])}
    rows = {r.module: r for r in build_rows("pkg", MODULES, {}, tests, {}, None, None, {"pkg/test_recall.py": ["pkg.recall"]})}
    assert rows["pkg.types"].status == "untested" and not rows["pkg.types"].covered_by


def test_calls_count_as_reaching_a_module_and_imports_do_not(tmp_path):
    from tern.verify.files_run import files_run
    from tern.verify.tasks import module_name

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "base.py").write_text("class Base:\n    def __init__(self):\n        self.ready = True\n")
    (tmp_path / "pkg" / "table.py").write_text("SQUARES = {i: i * i for i in range(3)}\n\n\ndef unused():\n    return 1\n")
    (tmp_path / "pkg" / "deep.py").write_text(
        '"""A module."""\nfrom __future__ import annotations\n\n\ndef outer():\n    """Doc."""\n\n    def inner():\n'
        '        return 1 / 0\n    return inner\n\n\nasync def waits():\n    return 2\n')
    (tmp_path / "pkg" / "lazy.py").write_text("def never():\n    return 3\n\n\nVALUES = [(lambda: 4)() for _ in range(2)]\n")
    import sys
    sys.path.insert(0, str(tmp_path))
    try:
        with files_run(tmp_path) as ran:
            import pkg.base
            import pkg.deep
            import pkg.lazy  # noqa: F401 - imported, its lambdas and comprehension run, no function
            import pkg.table  # noqa: F401 - imported, never called
            pkg.base.Base()
            inner = pkg.deep.outer()
            assert pkg.deep.outer.__doc__ == "Doc."  # the docstring stays one
            with pytest.raises(ZeroDivisionError) as raised:
                inner()
            assert raised.traceback[-1].lineno + 1 == 9  # the source's own line numbers
        assert not list((tmp_path / "pkg").rglob("*.pyc"))  # instrumented code is never cached
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("pkg", "pkg.base", "pkg.table", "pkg.deep", "pkg.lazy"):
            sys.modules.pop(name, None)
    assert {module_name(p, tmp_path) for p in ran} == {"pkg.base", "pkg.deep"}
