"""Read a verification report unit by unit: what failed that reaches a unit (evidence for
its next prompt) and what passed that reaches it (the proof that lets it be accepted).

A replayed case reaches the units its class or factory uses; a translated test reaches
the units its body uses (``units.PackageIndex.reached``). An import failure is pinned to
the unit holding the failing line when the traceback names one; otherwise it concerns
every unit of that module.
"""

from __future__ import annotations

import re

from tern.agent.units import PackageIndex, Unit
from tern.status import Status
from tern.verify.report import PackageReport

#: a frame as Python prints it, and as pytest prints it (``pkg/ops.py:27: in <module>``)
_FRAME = re.compile(r'File "([^"]+)", line (\d+)|^([^\s:"]+\.py):(\d+): in ', re.MULTILINE)


def case_text(case: dict) -> str:
    bad = [c for c in case.get("compared", []) if not c.get("ok")]
    if bad:
        details = "; ".join(c.get("problem") or f"{c['name']}: max abs {c.get('max_abs', 0):.3g}, max rel {c.get('max_rel', 0):.3g}"
                            for c in bad[:5])
    else:
        details = case.get("message", "")[-1500:]
    return f"replayed call {case['target']} (case {case['id']}) {case['status']}: {details}"


def _pinned(trace: str, index: PackageIndex) -> list[Unit]:
    """Units holding a frame of ``trace``, innermost last."""
    found = []
    for match in _FRAME.finditer(trace):
        path, line = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
        path = path if path.startswith("/") else "/" + path
        for rel, f in index.files.items():
            if path.endswith("/" + rel):
                definition = f.at(int(line))
                if definition is not None:
                    found.append(definition.unit)
    return found


def read(report: PackageReport, index: PackageIndex, units: list[Unit]) -> tuple[dict[Unit, list[str]], dict[Unit, list[str]]]:
    """(evidence, proof) per unit of ``units``: failures that reach it, and the passing
    tests and matched replays that reach it."""
    evidence: dict[Unit, list[str]] = {u: [] for u in units}
    proof: dict[Unit, list[str]] = {u: [] for u in units}
    wanted = set(units)

    def reach(file: str, name: str) -> set[Unit]:
        got = index.reached(file, name)
        # a method unit is reached when its class is
        return got | {u for u in wanted if u.kind == "method" and any(g.name == u.name.split(".")[0] and g.file == u.file for g in got)}

    for row in report.rows:
        for case in row.cases:
            target = index.unit_for_target(case["target"])
            if target is None:
                continue
            for unit in reach(target.file, target.name) & wanted:
                if case["status"] == Status.MATCH:
                    proof[unit].append(f"replayed call {case['target']} case {case['id']} matched")
                else:
                    evidence[unit].append(case_text(case))
        for test_id, outcome in row.tests.items():
            if outcome == "skipped":
                continue
            detail = row.details.get(test_id, {})
            definition = index.test_definition(test_id, detail.get("class", ""))
            if definition is None:  # a file that could not be collected: only what its traceback names
                for unit in [u for u in _pinned(detail.get("trace", ""), index) if u in wanted][-1:]:
                    evidence[unit].append(f"test {test_id}: {outcome}\n{detail.get('trace', '')[-2500:]}".rstrip())
                continue
            reached = reach(definition.unit.file, definition.unit.name) & wanted
            if outcome == "passed":
                for unit in reached:
                    proof[unit].append(f"test {test_id} passed")
                continue
            pinned = [u for u in _pinned(detail.get("trace", ""), index) if u in wanted]
            for unit in (pinned[-1:] if pinned else reached):
                evidence[unit].append(f"test {test_id}: {outcome}\n{detail.get('trace', '')[-2500:]}".rstrip())
        trace = row.details.get("import", {}).get("trace", "")
        if trace:
            pinned = [u for u in _pinned(trace, index) if u in wanted]
            module = index.by_module.get(row.module)
            concerned = pinned[-1:] or [u for u in wanted if module is not None and u.file == module.rel]
            for unit in concerned:
                evidence[unit].append(f"importing {row.module} failed:\n{trace[-2500:]}")
        for problem in row.problems:
            if problem.startswith("error: replay job") or problem.startswith("error: tests"):
                module = index.by_module.get(row.module)
                for unit in (u for u in wanted if module is not None and u.file == module.rel):
                    evidence[unit].append(problem)
    return evidence, proof
