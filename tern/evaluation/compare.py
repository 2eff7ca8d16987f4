"""What got better or worse between two eval runs, case by case (matched by case id).

A regression, per case present in the baseline:

- its status is worse (verified > partially verified > unverified > failed);
- fewer translated tests passed, or fewer replayed calls matched;
- more TODOs left (residue);
- its largest error grew more than ``MAX_ERROR_FACTOR`` times and is above
  ``ERROR_FLOOR`` (below it, float32 rounding noise is not news);
- it disappeared from the run.

Improvements are the mirror images. Cases new in the run are listed, neither.
"""

from __future__ import annotations

from typing import Any

from tern.status import Grade

MAX_ERROR_FACTOR = 10.0
ERROR_FLOOR = 1e-6


def _entry(case: str, what: str, before: Any, after: Any) -> dict[str, Any]:
    return {"case": case, "what": what, "before": before, "after": after}


def _count(old: dict, new: dict, field: str, total: str, case: str, what: str, worse: list, better: list) -> None:
    if new.get(field, 0) < old.get(field, 0):
        worse.append(_entry(case, what, f"{old.get(field, 0)}/{old.get(total, 0)}", f"{new.get(field, 0)}/{new.get(total, 0)}"))
    elif new.get(field, 0) > old.get(field, 0):
        better.append(_entry(case, what, f"{old.get(field, 0)}/{old.get(total, 0)}", f"{new.get(field, 0)}/{new.get(total, 0)}"))


def _rank(status: str) -> int:
    """Lower is better; a status this version does not know ranks below every grade."""
    grade = Grade.get(status)
    return grade.rank if grade is not None else 99


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    old = {c["id"]: c for c in before["cases"]}
    new = {c["id"]: c for c in after["cases"]}
    regressions: list[dict] = []
    improvements: list[dict] = []
    for case, was in old.items():
        now = new.get(case)
        if now is None:
            regressions.append(_entry(case, "case disappeared", was["status"], None))
            continue
        if _rank(now["status"]) > _rank(was["status"]):
            regressions.append(_entry(case, "status", was["status"], now["status"]))
        elif _rank(now["status"]) < _rank(was["status"]):
            improvements.append(_entry(case, "status", was["status"], now["status"]))
        _count(was, now, "tests_passed", "tests_total", case, "tests passed", regressions, improvements)
        _count(was, now, "replay_matched", "replay_total", case, "replayed calls matched", regressions, improvements)
        if now.get("residue", 0) > was.get("residue", 0):
            regressions.append(_entry(case, "residue (TODOs)", was.get("residue", 0), now["residue"]))
        elif now.get("residue", 0) < was.get("residue", 0):
            improvements.append(_entry(case, "residue (TODOs)", was["residue"], now.get("residue", 0)))
        a, b = was.get("max_abs"), now.get("max_abs")
        if a is not None and b is not None:
            if b > ERROR_FLOOR and b > a * MAX_ERROR_FACTOR:
                regressions.append(_entry(case, f"max abs error (grew > {MAX_ERROR_FACTOR:g}x)", a, b))
            elif a > ERROR_FLOOR and b * MAX_ERROR_FACTOR < a:
                improvements.append(_entry(case, f"max abs error (shrank > {MAX_ERROR_FACTOR:g}x)", a, b))
    added = [{"case": c, "status": new[c]["status"]} for c in new if c not in old]
    changed = {e["case"] for e in regressions + improvements}
    return {
        "baseline": {k: before.get(k) for k in ("timestamp", "git", "tern_version", "options")},
        "run": {k: after.get(k) for k in ("timestamp", "git", "tern_version", "options")},
        "score": {"before": before["summary"]["score"], "after": after["summary"]["score"]},
        "weighted": {"before": before["summary"]["weighted"], "after": after["summary"]["weighted"]},
        "counts": {"before": before["summary"]["counts"], "after": after["summary"]["counts"]},
        "regressions": regressions,
        "improvements": improvements,
        "new": added,
        "unchanged": sum(1 for c in new if c in old and c not in changed),
        "factor": MAX_ERROR_FACTOR,
        "floor": ERROR_FLOOR,
    }
