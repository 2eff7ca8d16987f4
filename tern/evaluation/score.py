"""How a case is scored, and the run's headline numbers.

A case's status, from the verification of its modules (``tern verify``'s per-module
statuses) and the facts of its translation:

- **verified**: the translation is complete (no TODO left, no TensorFlow outside
  ``tf.data`` pipelines, no file that failed to translate), at least one replayed call or
  translated test was compared, everything compared agreed within tolerance, no module
  errored, and every module that defines code was compared ("equivalent");
- **partially verified**: no mismatch anywhere, at least one module equivalent, and
  something short of verified: residue, TensorFlow left, a module that errored (e.g. it
  still imports TensorFlow) or a module with code that nothing compared;
- **unverified**: nothing was compared and nothing broke (no tests and no recorded calls,
  or only modules that cannot be compared). Never a pass: it counts against the score;
- **failed**: a mismatch (a replayed output or gradient, or a translated test, differs
  from the original), or nothing equivalent and something broke (no module imports,
  tests cannot run), or the pipeline itself failed for the case (migrate or
  verification raised).

Headline: ``score`` is the share of cases verified. ``weighted`` gives each case credit
1 (verified), 0.5 (partially verified) or 0 (unverified, failed) and averages it. Both
count every case, so an unverified case lowers both.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from tern.status import Grade, Status


@dataclass
class Translation:
    """What the migrate step left (a ready-made translation: only what its files show)."""

    residue: int = 0  # TODO(tern) sites
    tf_left: list[str] = field(default_factory=list)  # "file:line: import ..."
    errors: list[str] = field(default_factory=list)  # files that could not be translated
    edits_rules: int = 0
    edits_llm: int = 0
    attempts: int = 0  # LLM attempts, from the agent's totals
    tokens: int = 0
    seconds: float = 0.0
    code_modules: list[str] = field(default_factory=list)
    crash: str = ""  # migrate itself failed
    extra_phases: dict[str, float] = field(default_factory=dict)  # the LLM agent's: llm, llm_verify

    @property
    def complete(self) -> bool:
        return not (self.residue or self.tf_left or self.errors or self.crash)


@dataclass
class CaseResult:
    id: str
    suite: str
    name: str
    kind: str  # "migrate": a TF package tern translates; "translation": a ready-made one
    source: str
    original: str
    out: str  # the translated package that was verified
    status: str = Grade.FAILED
    reason: str = ""
    translated: bool = False
    residue: int = 0
    tf_left: list[str] = field(default_factory=list)
    tests_passed: int = 0
    tests_total: int = 0
    replay_matched: int = 0
    replay_total: int = 0
    max_abs: float | None = None
    max_rel: float | None = None
    #: compared outputs and gradients per decade of their max abs error ("-7": 1e-7 <= e < 1e-6; "zero")
    error_decades: dict[str, int] = field(default_factory=dict)
    #: training-step equivalence (the verify report's ``training.status``): equivalent, mismatch,
    #: error, "not compared" (steps called, none comparable), or "n/a" (no test calls a step)
    training: str = "n/a"
    edits_rules: int = 0
    edits_llm: int = 0
    attempts: int = 0
    tokens: int = 0
    phases: dict[str, float] = field(default_factory=dict)  # migrate, record, replay, tests (worker seconds)
    seconds: float = 0.0  # wall time of the case: migrate + verify
    original_tests: dict[str, int] = field(default_factory=dict)  # passed / total under TensorFlow
    modules: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    jobs_run: int = 0
    jobs_cached: int = 0
    expect: str | None = None
    expectation: str | None = None  # None (no expect), "met", "better", "worse"
    cached: bool = False  # the whole result came from the eval cache

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseResult:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @property
    def llm_share(self) -> float:
        total = self.edits_rules + self.edits_llm
        return self.edits_llm / total if total else 0.0


def _decade(value: float) -> str:
    return "zero" if value <= 0 else str(math.floor(math.log10(value)))


def score(result: CaseResult, translation: Translation, verify: dict[str, Any] | None, verify_error: str = "") -> CaseResult:
    """Fill ``result`` from the translation facts and the verification report
    (``PackageReport.to_dict()``, None when verification did not run)."""
    result.translated = translation.complete
    result.residue = translation.residue
    result.tf_left = list(translation.tf_left)
    result.edits_rules, result.edits_llm = translation.edits_rules, translation.edits_llm
    result.attempts, result.tokens = translation.attempts, translation.tokens
    result.phases = {"migrate": round(translation.seconds, 4),
                     **{k: round(v, 4) for k, v in translation.extra_phases.items()}}
    problems = [f"migrate: {translation.crash}"] if translation.crash else []
    problems += [f"not translated: {e}" for e in translation.errors]
    rows = (verify or {}).get("rows", [])
    for row in rows:
        result.tests_passed += row["tests_passed"]
        result.tests_total += row["tests_total"]
        result.replay_matched += row["cases_matched"]
        result.replay_total += row["cases_total"]
        for bound in ("max_abs", "max_rel"):
            if row.get(bound) is not None:
                setattr(result, bound, max(getattr(result, bound) or 0.0, row[bound]))
        for case in row.get("cases", []):
            for check in case.get("compared", []):
                if check.get("max_abs") is not None:
                    key = _decade(check["max_abs"])
                    result.error_decades[key] = result.error_decades.get(key, 0) + 1
        result.modules.append({k: row[k] for k in ("module", "status", "tests_passed", "tests_total", "cases_matched",
                                                   "cases_total", "max_abs", "max_rel")} | {"problems": row["problems"][:5]})
        problems += [f"{row['module']}: {p}" for p in row["problems"]]
    if verify:
        for phase, seconds in verify.get("phases", {}).items():
            result.phases[phase] = round(seconds, 4)
        original = verify.get("original_tests", {})
        result.original_tests = {"passed": sum(o == "passed" for o in original.values()),
                                 "total": sum(o != "skipped" for o in original.values())}
        if result.original_tests["passed"] < result.original_tests["total"]:
            problems.append(f"{result.original_tests['total'] - result.original_tests['passed']} original TF tests fail")
        if verify.get("record_error"):
            problems.append(f"recording the original tests: {verify['record_error']}")
        training = verify.get("training")
        if isinstance(training, dict) and training.get("status"):
            result.training = str(training["status"])
    if verify_error:
        problems.append(f"verify: {verify_error}")
    result.problems = problems
    result.status, result.reason = _status(result, translation, rows, verify, verify_error)
    return result


def _status(result: CaseResult, translation: Translation, rows: list[dict], verify: dict | None,
            verify_error: str) -> tuple[str, str]:
    by_status: dict[str, list[str]] = {}
    for row in rows:
        by_status.setdefault(row["status"], []).append(row["module"])
    equivalent, errored = by_status.get(Status.EQUIVALENT, []), by_status.get(Status.ERROR, [])
    compared = f"{result.replay_total} replayed calls and {result.tests_total} translated tests compared" + \
        (f", training steps {result.training}" if result.training != "n/a" else "")
    if translation.crash:
        return Grade.FAILED, f"migrate failed: {translation.crash}"
    if verify_error or verify is None:
        return Grade.FAILED, f"verification failed: {verify_error or 'not run'}"
    if by_status.get(Status.MISMATCH):
        return Grade.FAILED, f"mismatch: {_first_problem(rows, Status.MISMATCH, ('mismatch: ', 'test failed: '))}"
    if not equivalent:
        if errored:
            return Grade.FAILED, f"nothing verified; {_count(errored, 'module')} in error: {_first_problem(rows, Status.ERROR, ('error: ',))}"
        if verify.get("record_error"):
            return Grade.FAILED, f"nothing verified; recording the original tests failed: {verify['record_error']}"
        return Grade.UNVERIFIED, "nothing was compared: no translated test ran and no recorded call was replayed"
    uncovered = sorted(set(by_status.get(Status.UNTESTED, [])) & set(translation.code_modules))
    short = []
    if translation.residue:
        short.append(f"{translation.residue} TODOs left")
    if translation.tf_left:
        short.append(f"TensorFlow left ({translation.tf_left[0]})")
    if translation.errors:
        short.append(f"{len(translation.errors)} files not translated")
    if errored:
        short.append(f"errors in {', '.join(errored[:3])}")
    if uncovered:
        short.append(f"nothing compared in {', '.join(uncovered[:3])}")
    if short:
        return Grade.PARTIALLY_VERIFIED, f"{_count(equivalent, 'module')} equivalent; " + "; ".join(short)
    return Grade.VERIFIED, f"{compared}, all within tolerance"


def _count(items: list, noun: str) -> str:
    return f"{len(items)} {noun}{'' if len(items) == 1 else 's'}"


def _first_problem(rows: list[dict], status: str, prefixes: tuple[str, ...]) -> str:
    """The first problem of the first module with ``status``, without its prefix."""
    row = next(r for r in rows if r["status"] == status)
    problem = next((p for p in row["problems"] if p.startswith(prefixes)), row["problems"][0] if row["problems"] else "")
    for prefix in prefixes:
        problem = problem.removeprefix(prefix)
    return f"{row['module']}: {problem}" if not problem.startswith(row["module"]) else problem


def expectation(status: str, expect: str | None) -> str | None:
    if expect is None:
        return None
    if status == expect:
        return "met"
    return "better" if Grade(status).rank < Grade(expect).rank else "worse"


def summary(cases: list[CaseResult]) -> dict[str, Any]:
    counts = {status: sum(c.status == status for c in cases) for status in Grade}
    n = len(cases)
    phases: dict[str, float] = {}
    for case in cases:
        for phase, seconds in case.phases.items():
            phases[phase] = round(phases.get(phase, 0.0) + seconds, 4)
    rules, llm = sum(c.edits_rules for c in cases), sum(c.edits_llm for c in cases)
    return {
        "cases": n,
        "counts": counts,
        "score": round(counts[Grade.VERIFIED] / n, 4) if n else 0.0,
        "weighted": round(sum(Grade(c.status).credit for c in cases) / n, 4) if n else 0.0,
        "translated": sum(c.translated for c in cases),
        "residue": sum(c.residue for c in cases),
        "tests_passed": sum(c.tests_passed for c in cases),
        "tests_total": sum(c.tests_total for c in cases),
        "replay_matched": sum(c.replay_matched for c in cases),
        "replay_total": sum(c.replay_total for c in cases),
        "max_abs": max((c.max_abs for c in cases if c.max_abs is not None), default=None),
        "edits_rules": rules,
        "edits_llm": llm,
        "llm_share": round(llm / (rules + llm), 4) if rules + llm else 0.0,
        "attempts": sum(c.attempts for c in cases),
        "tokens": sum(c.tokens for c in cases),
        "phases": phases,
        "worse_than_expected": [c.id for c in cases if c.expectation == "worse"],
        "better_than_expected": [c.id for c in cases if c.expectation == "better"],
    }


def headline(summary: dict[str, Any]) -> str:
    counts = summary["counts"]
    return (f"score {summary['score']:.1%} ({counts['verified']}/{summary['cases']} verified), "
            f"weighted {summary['weighted']:.1%}; " + ", ".join(f"{n} {s}" for s, n in counts.items()))
