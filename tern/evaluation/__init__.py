"""``tern eval``: score translations over suites of cases, compare runs, render reports.

``suite`` reads what to run, ``run`` migrates and verifies each case (cached whole),
``score`` says what a case's outcome is worth, ``report`` is the JSON every view and
comparison reads, ``compare`` finds regressions, ``render`` and ``html`` show them.
"""

from tern.evaluation.compare import compare
from tern.evaluation.score import CaseResult, summary
from tern.evaluation.suite import Case, Suite, load_suite

__all__ = ["Case", "CaseResult", "Suite", "compare", "load_suite", "summary"]
