"""Verification results per module, their status, and the JSON report.

Status of a module, strongest finding first:
- ``mismatch``: a replayed case or training step differs from Keras beyond tolerance, or a
  translated test fails;
- ``error``: the module does not import, a case or step could not be replayed, a job crashed;
- ``equivalent``: at least one case, training step or test was compared, and all agree;
- ``untested``: nothing was compared. Never reported as a pass.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from tern.status import Status
from tern.verify.step_report import add_training, training_lines, training_markdown


class JobAnswer(NamedTuple):
    """What one verify job gave: its value (None when the job failed), the failed job's
    ``JobResult`` (None when it did not fail), and whether the value came from the cache."""

    value: dict | None
    failure: Any
    cached: bool


@dataclass
class ModuleRow:
    module: str
    tests_passed: int = 0
    tests_failed: int = 0  # assertion failures: the translation behaves differently
    tests_errors: int = 0  # errors: the test could not run (collection, setup, an exception)
    #: tests that ended on a statement tern left untranslated in the test file (``untranslated.py``):
    #: neither passed nor failed, so not in ``tests_total``; "test: reason" each
    not_run: list[str] = field(default_factory=list)
    tests_total: int = 0
    cases_matched: int = 0
    cases_total: int = 0
    train_matched: int = 0  # replayed training-step sessions that agreed at every step
    train_total: int = 0  # sessions compared (not those "not compared")
    max_abs: float | None = None
    max_rel: float | None = None
    status: str = Status.UNTESTED
    problems: list[str] = field(default_factory=list)  # one line each: what differs or broke, and where
    cached: bool = False
    #: per replayed case: target, id, status, and per output/gradient its max abs and rel error
    cases: list[dict] = field(default_factory=list)
    #: per translated test: "passed" / "failure: ..." / "error: ..." / "untranslated: ..." / "skipped"
    tests: dict[str, str] = field(default_factory=dict)
    #: evidence for whoever fixes it: per failing test its class and traceback, and the
    #: module's import traceback under "import"
    details: dict[str, dict] = field(default_factory=dict)
    #: per replayed training-step session of a step this module defines (``step_report.py``)
    training: list[dict] = field(default_factory=list)
    #: test files owned by no module that import this one (``test_metrics.py`` importing
    #: ``f1_score``): with nothing of its own compared, the module takes their outcome
    covered_by: list[str] = field(default_factory=list)
    #: the judged value farthest from Keras on inputs beyond the tests' (``probes.py``): its
    #: case, name (``output @ probe``), errors and the share of its tolerance it used
    probe_worst: dict | None = None
    probes_judged: int = 0
    probes_not_judged: int = 0
    #: literal defaults of top-level functions compared from the two sources (``static_defaults.py``);
    #: a difference is a mismatch, agreement alone makes no module equivalent
    defaults_compared: int = 0

    def settle(self) -> None:
        compared = self.cases_total + self.tests_total + self.train_total
        if any(p.startswith("mismatch") for p in self.problems) or self.tests_failed:
            self.status = Status.MISMATCH
        elif self.problems:
            self.status = Status.ERROR
        elif compared and (self.cases_matched or self.tests_passed or self.train_matched):
            self.status = Status.EQUIVALENT
        else:
            self.status = Status.UNTESTED


@dataclass
class PackageReport:
    package: str
    original: str
    translated: str
    rows: list[ModuleRow]
    original_tests: dict[str, str] = field(default_factory=dict)
    record_error: str = ""
    skipped: dict[str, dict[str, int]] = field(default_factory=dict)
    #: training steps the original tests called: ``{"status", "steps"}`` (``step_report.training_summary``)
    training: dict[str, Any] = field(default_factory=lambda: {"status": "n/a", "steps": []})
    phases: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    cached_jobs: int = 0
    jobs: int = 0

    @property
    def status(self) -> str:
        found = [r.status for r in self.rows] + ([Status.ERROR] if self.record_error else [])
        return Status.worst(found, default=Status.UNTESTED)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "status": self.status}


def to_json(reports: list[PackageReport], extra: dict[str, Any] | None = None) -> str:
    counts = {s: sum(1 for r in reports for row in r.rows if row.status == s) for s in Status.of_modules()}
    return json.dumps({"packages": [r.to_dict() for r in reports], "modules": counts, **(extra or {})}, indent=1)


def _owner(test_file: str, modules: list[str], package: str, imported: list[str] = ()) -> str:
    """The module a test file tests: by name (``model_test.py``/``test_model.py`` ->
    ``model``); else the one package module it imports whose name is or contains the test's
    (``test_majority_vote.py`` importing ``match_majority_vote``), or the only one it imports;
    otherwise the test file is a row of its own."""
    stem = test_file[:-3].replace("/", ".")
    parts = stem.split(".")
    leaf = parts[-1]
    base = leaf[5:] if leaf.startswith("test_") else leaf[:-5] if leaf.endswith("_test") else leaf
    guess = ".".join([package, *parts[:-1], base])
    if guess in modules:
        return guess
    named = [m for m in imported if base in m.rsplit(".", 1)[-1] or m.rsplit(".", 1)[-1] in base]
    if len(named) == 1:
        return named[0]
    if len(imported) == 1:
        return imported[0]
    return f"{package}.{stem}"


def build_rows(package: str, modules: list[str], replays: dict[str, JobAnswer], tests: dict[str, JobAnswer],
               recording: dict | None, record_failure: Any, trains: dict[str, JobAnswer] | None = None,
               imports: dict[str, list[str]] | None = None, defaults: dict[str, list[dict]] | None = None) -> list[ModuleRow]:
    rows: dict[str, ModuleRow] = {m: ModuleRow(m) for m in modules}
    for module, checks in (defaults or {}).items():
        row = rows.setdefault(module, ModuleRow(module))
        row.defaults_compared += len(checks)
        row.problems.extend(f"mismatch: {c['name']}: {c['problem']}" for c in checks if not c["ok"])
    for module, (value, failure, hit) in replays.items():
        row = rows.setdefault(module, ModuleRow(module))
        row.cached = hit
        if failure is not None:
            row.problems.append(f"error: replay job {failure.cause}: {_last_line(failure.error)}")
            continue
        if value.get("import_error"):
            row.problems.append(f"error: import: {_last_line(value['import_error'])}")
            row.details["import"] = {"trace": value["import_error"]}
        for case in value.get("cases", []):
            if case["status"] == Status.NOT_COMPARED:  # listed with its reason, neither a pass nor a failure
                row.cases.append({"target": case["target"], "id": case["id"], "status": case["status"],
                                  "note": case.get("note", "")})
                continue
            row.cases_total += 1
            checks = (case.get("outputs", []) + case.get("gradients", []) + case.get("state", []) + case.get("interface", [])
                      + case.get("init", []) + case.get("variants", []))
            probes = case.get("probes", [])
            row.cases.append({"target": case["target"], "id": case["id"], "status": case["status"], "ran": case.get("ran", []),
                              "compared": [_summary(c) for c in checks],
                              **({"probes": [_summary(c) for c in probes], "probe_ms": case.get("probe_ms")}
                                 if probes else {}),
                              **({"search": case["search"]} if case.get("search") else {}),
                              **({"init_notes": case["init_notes"]} if case.get("init_notes") else {}),
                              **({"init_earlier": True} if case.get("init_earlier") else {}),
                              **({"note": case.get("eager") or case["note"]} if case.get("eager") or case.get("note") else {}),
                              **({"message": case["message"][-2000:]} if case.get("message") else {})})
            for check in checks:
                if "max_abs" in check:
                    row.max_abs = max(row.max_abs or 0.0, check["max_abs"])
                    row.max_rel = max(row.max_rel or 0.0, check["max_rel"])
            _note_probes(row, case, probes)
            if case["status"] == Status.MATCH:
                row.cases_matched += 1
            elif case["status"] == Status.MISMATCH:
                bad = next((c for c in checks + probes if not c["ok"]), None)
                where = (f"{bad['name']}: " + (bad.get("problem") or _beyond(bad))
                         + (f" (input saved: {bad['input']})" if bad.get("input") else "")) if bad else case.get("message", "")
                if case.get("raised"):  # a variant Keras ran and the translation did not (``replay._replay_variant``)
                    where = f"the translation raises where Keras runs: {_last_line(case.get('message', ''))}"
                row.problems.append(f"mismatch: {case['target']} case {case['id']}: {where}"
                                    + (f"; {case['note']}" if case.get("note") else ""))
            else:
                row.problems.append(f"error: {case['target']} case {case['id']}: {_last_line(case.get('message', ''))}")
    for test_file, (value, failure, hit) in tests.items():
        owner = _owner(test_file, modules, package, (imports or {}).get(test_file, []))
        row = rows.setdefault(owner, ModuleRow(owner))
        row.cached = row.cached or hit
        if failure is not None:
            row.problems.append(f"error: tests {test_file}: job {failure.cause}: {_last_line(failure.error)}")
            continue
        outcomes = value.get("tests", {})
        row.tests.update(outcomes)
        row.details.update(value.get("details", {}))
        if not outcomes and value.get("exit") not in (0, 5):
            row.problems.append(f"error: tests {test_file}: pytest exit {value.get('exit')} (collection failed?)")
        for test, outcome in outcomes.items():
            if outcome == "skipped":
                continue
            if outcome.startswith("untranslated: "):
                row.not_run.append(f"{test}: {outcome.removeprefix('untranslated: ')}")
                continue
            row.tests_total += 1
            if outcome == "passed":
                row.tests_passed += 1
            elif outcome.startswith("failure"):
                row.tests_failed += 1
                row.problems.append(f"test failed: {test}: {outcome[:200]}")
            else:
                row.tests_errors += 1
                row.problems.append(f"error: test {test}: {outcome[:200]}")
    add_training(rows, trains or {}, ModuleRow)
    if recording is None and record_failure is not None:
        for row in rows.values():
            row.problems.append(f"error: recording the original tests failed ({record_failure.cause})")
    for row in rows.values():
        row.settle()
    _cover_by_replays(rows)
    _cover_by_tests(rows, tests)
    for test_file, imported in (imports or {}).items():
        owner = _owner(test_file, modules, package, imported)
        if owner in modules:
            continue  # a module's own tests: counted there
        for module in imported:
            row = rows.get(module)
            if row is None or row.status != Status.UNTESTED or row.problems:
                continue
            row.covered_by.append(test_file)
            if rows[owner].status == Status.EQUIVALENT and row.status == Status.UNTESTED:
                row.status = Status.EQUIVALENT
            elif Status(rows[owner].status).failing:
                row.status = rows[owner].status
                row.problems.append(f"{'test failed' if row.status == Status.MISMATCH else 'error'}: tests in {test_file}, "
                                    "which import it, do not pass")
    return sorted(rows.values(), key=lambda r: r.module)


def _cover_by_replays(rows: dict[str, "ModuleRow"]) -> None:
    """A module with nothing compared of its own whose layers ran inside replayed calls of
    another module (helper blocks of a model) is equivalent when every such call matched:
    its code was part of each compared output and gradient."""
    covering: dict[str, list[dict]] = {}
    for owner, row in rows.items():
        for case in row.cases:
            for module in case.get("ran", []):
                if module != owner:
                    covering.setdefault(module, []).append({**case, "owner": owner})
    for module, cases in covering.items():
        row = rows.get(module)
        if row is None or row.status != Status.UNTESTED or row.problems:
            continue
        if all(c["status"] == Status.MATCH for c in cases):
            row.covered_by.extend(sorted({f"{c['target']} (replayed)" for c in cases}))
            row.status = Status.EQUIVALENT


def _cover_by_tests(rows: dict[str, "ModuleRow"], tests: dict[str, JobAnswer]) -> None:
    """A module with nothing compared of its own whose functions ran in translated test
    files (an abstract base whose ``__init__`` subclasses call) is equivalent when each such
    file passed: those tests checked its code."""
    running: dict[str, list[tuple[str, dict]]] = {}
    for test_file, (value, failure, _) in tests.items():
        if failure is None:
            for module in value.get("ran", []):
                running.setdefault(module, []).append((test_file, value.get("tests", {})))
    for module, files in running.items():
        row = rows.get(module)
        if row is None or row.status != Status.UNTESTED or row.problems:
            continue
        outcomes = [o for _, tests_run in files for o in tests_run.values() if o != "skipped"]
        if outcomes and all(o == "passed" for o in outcomes):
            row.covered_by.extend(sorted(f"{test_file} (ran its code)" for test_file, _ in files))
            row.status = Status.EQUIVALENT


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _summary(check: dict) -> dict:
    return {k: check[k] for k in ("name", "ok", "max_abs", "max_rel", "rounding", "keras_float64", "problem", "not_judged",
                                  "input", "distribution") if k in check}


def probe_worst(checks: list[dict]) -> dict | None:
    """The judged probe value nearest to failing (the largest share of its tolerance used, a
    failed one first): the "largest error found beyond the tests' inputs"."""
    judged = [c for c in checks if "used" in c and "not_judged" not in c]
    return max(judged, key=lambda c: (not c["ok"], c["used"]), default=None)


def _note_probes(row: ModuleRow, case: dict, probes: list[dict]) -> None:
    """Count a case's probe values and keep the module's worst judged one."""
    judged = [c for c in probes if "not_judged" not in c]
    row.probes_judged += len(judged)
    row.probes_not_judged += len(probes) - len(judged)
    worst = probe_worst(judged)
    if worst is None or "used" not in worst:
        return
    if row.probe_worst is None or (not worst["ok"], worst["used"]) > (not row.probe_worst["ok"], row.probe_worst["used"]):
        row.probe_worst = {"target": case["target"], "case": case["id"], "name": worst["name"], "ok": worst["ok"],
                           "max_abs": worst["max_abs"], "max_rel": worst["max_rel"], "used": worst["used"]}


def problem_lines(report: PackageReport) -> list[str]:
    """One line per finding of a package: the recording, failing original tests, calls
    that could not be replayed, then each module's problems."""
    lines = []
    if report.record_error:
        lines.append(f"{report.package}: recording the original tests: {report.record_error}")
    failing = [t for t, o in report.original_tests.items() if o not in ("passed", "skipped")]
    if failing:
        lines.append(f"{report.package}: {len(failing)} original TF tests fail, e.g. {failing[0]}")
    for target, reasons in report.skipped.items():
        for reason, count in reasons.items():
            lines.append(f"{target}: {count} call(s) not replayable: {reason}")
    lines.extend(training_lines(report.training))
    for row in report.rows:
        lines.extend(f"{row.module}: {p}" for p in row.problems)
        lines.extend(f"{row.module}: not run: {n}" for n in row.not_run)
    return lines


def to_markdown(reports: list[PackageReport], *, level: int = 2, max_problems: int = 20) -> str:
    """Verification results as Markdown: per package its status; per module its status,
    translated tests passed, replayed cases matched and largest errors; then what differs
    or broke (the first ``max_problems`` lines per package). Deterministic (no timings, no
    cache flags), so it can be committed beside a translation and diffed."""
    head = "#" * level
    counts = {s: sum(1 for r in reports for row in r.rows if row.status == s) for s in Status.of_modules()}
    lines = [f"{head} Verification", "", ", ".join(f"{n} {s}" for s, n in counts.items()) + " modules."]
    for report in reports:
        lines += ["", f"{head}# `{report.package}`: {report.status}", ""]
        lines += ["| module | status | tests passed | replay matched | max abs err | max rel err |",
                  "| --- | --- | ---: | ---: | ---: | ---: |"]
        for row in report.rows:
            tests = f"{row.tests_passed}/{row.tests_total}" if row.tests_total else "-"
            replay = f"{row.cases_matched}/{row.cases_total}" if row.cases_total else "-"
            abs_err = f"{row.max_abs:.1e}" if row.max_abs is not None else "-"
            rel_err = f"{row.max_rel:.1e}" if row.max_rel is not None else "-"
            lines.append(f"| `{row.module}` | {_md(row.status)} | {tests} | {replay} | {abs_err} | {rel_err} |")
        lines += training_markdown(report.training, head, _md)
        problems = problem_lines(report)
        if problems:
            lines += ["", "Problems:", ""]
            lines += [f"- {_md(p)}" for p in problems[:max_problems]]
            if len(problems) > max_problems:
                lines.append(f"- ... and {len(problems) - max_problems} more (see the JSON report)")
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    """One line, safe in a table cell or a bullet: no pipes, no raw HTML."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _beyond(check: dict) -> str:
    """How far a compared value is off, and the tolerance it missed."""
    text = f"max abs {check['max_abs']:.3g}, max rel {check['max_rel']:.3g} > rtol {check['rtol']:g} / atol {check['atol']:g}"
    if "rounding" in check:
        text += f" (against the translation in float64, beyond {check['factor']:g}x its float32 rounding {check['rounding']:.3g})"
    elif check.get("keras_float64"):
        text += " (Keras and the translation both in float64)"
    return text
