"""The agent loop for one package: what the rules left goes to the LLM one unit at a time,
and nothing it writes is kept unless the sandbox shows it behaves like the original.

Per round, every pending unit gets an answer (an answer that fails validation is retried
at once with the reason); the answers are spliced into a copy of the translation, the
copy is verified (translated tests + replayed calls, through the verifier's caches), and
each unit is judged on what reaches it: accepted when something compared it and nothing
that reaches it failed; otherwise retried with that evidence, up to ``attempts``
answers. A unit nothing compares is not accepted (``unverified``). Accepted units are
written to the translation at once (atomically) and journaled in the cache, so a rerun
resumes without asking again; they are never touched afterwards. What is still pending
at the end keeps its best attempt under a ``TODO(tern)`` saying why.
"""

from __future__ import annotations

import ast
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import anyio

from tern.agent import evidence as evidence_mod
from tern.agent.answer import Answer, Rejected, code_blocks, cut_reason, extract, stop_reading
from tern.agent.llm import ChatModel, Completion, LLMFailure
from tern.agent.prompt import UnitContext, messages
from tern.agent.splice import SpliceError, splice
from tern.agent.tokens import answer_allowance
from tern.agent.units import PackageIndex, Unit
from tern.engine.runner import write_atomic
from tern.status import Status
from tern.verify import keys
from tern.verify.cache import Cache
from tern.verify.config import VerifyConfig
from tern.verify.report import PackageReport
from tern.verify.run import PackageVerifier


class Budget:
    """Tokens one run may spend, shared by its packages. A request already in flight
    when it runs out still counts: the overshoot is at most one answer per request."""

    def __init__(self, tokens: int):
        self.total = tokens
        self.spent = 0

    def allows(self) -> bool:
        return self.spent < self.total

    def charge(self, tokens: int) -> None:
        self.spent += tokens


@dataclass
class UnitOutcome:
    file: str
    name: str
    kind: str
    #: accepted | resumed (accepted by an earlier run) | unverified (nothing compares it)
    #: | failed (attempts spent; best attempt kept) | rejected (no valid answer)
    #: | budget | llm_error
    status: str = "pending"
    attempts: int = 0
    tokens: int = 0
    reasons: list[str] = field(default_factory=list)
    detail: str = ""
    proof: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)


@dataclass
class AgentReport:
    package: str
    model: str
    units: list[UnitOutcome] = field(default_factory=list)
    loose_todos: list[str] = field(default_factory=list)  # module-level TODOs: no unit to ask about
    prompt_tokens: int = 0
    completion_tokens: int = 0
    counted_tokens: int = 0  # of those, estimated by tern: the server reported no usage (a cut answer, a timeout)
    requests: int = 0
    answers: int = 0  # requests that brought an answer (cached ones too)
    rejected_answers: int = 0  # answers rejected before running (no valid code block)
    cached_answers: int = 0
    stops: dict[str, int] = field(default_factory=dict)  # why reading answers ended: end | block | doomed | looping | size
    failures: dict[str, int] = field(default_factory=dict)  # requests without an answer, by cause
    concurrency: dict[str, Any] = field(default_factory=dict)  # LLM requests at once: configured, final, why it changed
    rounds: int = 0
    phases: dict[str, float] = field(default_factory=lambda: {"llm": 0.0, "verify": 0.0})
    stopped: str = ""  # "" | "budget"

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tokens": self.tokens,
                "attempts": sum(u.attempts for u in self.units),
                "accepted": sum(u.status in ("accepted", "resumed") for u in self.units)}


def journal_key(original: Path, unit: Unit, rule_code: str, model: str) -> str:
    """An accepted unit stands for the same original package, the same rule output of the
    unit and the same model (another model does its own work: evals compare models); a
    rerun offers it again as an answer, verified like any other."""
    return keys.digest("agent-unit", keys.tree_hash(original), unit.key, rule_code, model)


class PackageAgent:
    def __init__(self, original: Path, translated: Path, *, model: ChatModel, runner: Any, cache: Cache,
                 attempts: int, budget: Budget, sandbox_limit: anyio.CapacityLimiter, verify_config: VerifyConfig,
                 progress: Callable[[str], None] | None = None):
        self.original = original.resolve()
        self.translated = translated.resolve()
        self.package = self.original.name
        self.model = model
        self.runner = runner
        self.cache = cache
        self.attempts = attempts
        self.budget = budget
        self.sandbox_limit = sandbox_limit
        self.verify_config = verify_config
        self.progress = progress or (lambda message: None)
        self.report = AgentReport(self.package, model.name)
        self.work = cache.state_dir / "agent" / keys.digest(str(self.translated))[:16]
        self.original_index = PackageIndex(self.original, self.package)
        self.outcomes: dict[Unit, UnitOutcome] = {}
        self.evidence: dict[Unit, list[str]] = {}
        self.previous: dict[Unit, str] = {}
        self.latest: dict[Unit, Answer] = {}
        self.best: dict[Unit, tuple[int, Answer]] = {}
        self.rule_code: dict[Unit, str] = {}  # each unit as the rules left it
        self.journaled: set[Unit] = set()  # answers offered from an earlier run's journal
        self.held: set[Unit] = set()  # answers a sibling's failure kept from being checked

    # -- the loop ---------------------------------------------------------------------

    async def run(self) -> AgentReport:
        index = PackageIndex(self.translated, self.package)
        todo_units, self.report.loose_todos = index.todo_units()
        for unit, reasons in todo_units.items():
            self.outcomes[unit] = UnitOutcome(unit.file, unit.name, unit.kind, reasons=reasons)
            self.rule_code[unit] = index.source(unit)
        baseline = await self._verify(self.translated)
        index = PackageIndex(self.translated, self.package)
        for row in baseline.rows:  # rule translations that verification caught
            for case in row.cases:
                unit = index.unit_for_target(case["target"])
                if case["status"] == Status.MISMATCH and unit is not None and unit not in self.outcomes:
                    self.outcomes[unit] = UnitOutcome(unit.file, unit.name, unit.kind, reasons=[
                        f"the rule translation differs from the original: {evidence_mod.case_text(case)}"])
                    self.rule_code[unit] = index.source(unit)
        pending = self._pending()
        if pending:
            found, _ = evidence_mod.read(baseline, index, pending)
            for unit in pending:
                self.evidence[unit] = [e for e in found[unit] if "replayed call" in e and "mismatch" in e][:3]
        self._resume()
        for round_number in range(1, self.attempts + 1):
            pending = [u for u in self._pending()
                       if self.outcomes[u].attempts < self.attempts or u in self.journaled or u in self.held]
            if not pending:
                break
            self.report.rounds = round_number
            async with anyio.create_task_group() as group:
                for unit in pending:
                    group.start_soon(self._answer, unit)
            asked = [u for u in pending if u in self.latest and self.outcomes[u].status == "pending"]
            if asked:
                await self._judge(asked, round_number)
        self._finish()
        shutil.rmtree(self.work, ignore_errors=True)
        self.report.units = sorted(self.outcomes.values(), key=lambda o: (o.file, o.name))
        return self.report

    def _pending(self) -> list[Unit]:
        return [u for u, o in self.outcomes.items() if o.status == "pending"]

    def _resume(self) -> None:
        for unit, outcome in self.outcomes.items():
            entry = self.cache.get(journal_key(self.original, unit, self.rule_code[unit], self.model.name), "agent")
            if entry is not None:
                self.latest[unit] = Answer(entry["code"], tuple(entry["imports"]))
                self.journaled.add(unit)
                outcome.attempts, outcome.tokens = entry["attempts"], entry["tokens"]

    async def _answer(self, unit: Unit) -> None:
        """Ask until an answer passes validation, the unit's attempts are spent, the
        budget is, or the endpoint fails."""
        outcome = self.outcomes[unit]
        if unit in self.journaled or unit in self.held:
            return  # its answer is verified (again) in this round, not asked for
        lost = False  # the last request brought no answer (timeout, stalled, dropped)
        while outcome.attempts < self.attempts:
            current = (self.translated / unit.file).read_text()
            ctx = UnitContext(
                file=unit.file, name=unit.name, kind=unit.kind, reasons=outcome.reasons,
                original=self.original_index.source(unit) if unit.file in self.original_index.files else "",
                original_imports=_imports_of(self.original / unit.file), translated_module=current,
                evidence=self.evidence.get(unit, []), previous=self.previous.get(unit, ""))
            allowance = answer_allowance(max(ctx.original, self.rule_code[unit], key=len))
            started = time.perf_counter()
            result = await self.model.complete(  # admitted once a slot is free: the requests before may have spent the budget
                messages(ctx), max_tokens=allowance, stop_when=lambda text: stop_reading(text, self.package),
                admit=self.budget.allows)
            self.report.phases["llm"] += time.perf_counter() - started
            self._count(result, outcome)
            if isinstance(result, LLMFailure) and result.cause == "budget":
                last = f"; before: {outcome.detail}" if outcome.detail else ""
                outcome.status, outcome.detail = "budget", f"token budget of {self.budget.total} spent{last}"
                self.report.stopped = "budget"
                return
            outcome.attempts += 1
            lost = isinstance(result, LLMFailure) and result.cause != "empty"  # no answer came (timeout, stalled...)
            if isinstance(result, LLMFailure):
                if result.cause not in ANSWER_LOST:
                    outcome.status, outcome.detail = "llm_error", f"{result.cause}: {result.message}"
                    return
                if result.cause == "empty":
                    self.evidence[unit] = [f"your answer was rejected: {result.message}"]
                    outcome.detail = f"answer rejected: {result.message}"
                else:
                    outcome.detail = f"no answer ({result.cause}): {result.message}"
                continue
            found = extract(result.text, unit, self.package)
            if isinstance(found, Answer):
                trial = splice(current, unit, found.code, found.imports)
                if isinstance(trial, SpliceError):
                    found = Rejected(trial.reason)
            if isinstance(found, Rejected) and result.stop == "size" and not code_blocks(result.text):
                found = Rejected(f"the answer ran past the {allowance} tokens allowed for this unit without a complete ```python block")
            elif isinstance(found, Rejected) and cut_reason(result.text, result.stop, self.package):
                found = Rejected(cut_reason(result.text, result.stop, self.package))  # closed early: why, not "no block"
            if isinstance(found, Rejected):
                self.report.rejected_answers += 1
                self.progress(f"{self.package}: {unit.key}: answer {outcome.attempts} rejected: {found.reason}")
                self.evidence[unit] = [f"your answer was rejected before running: {found.reason}"]
                blocks = code_blocks(result.text)
                self.previous[unit] = blocks[0] if blocks else result.text[:2000]
                outcome.detail = f"answer rejected: {found.reason}"
                continue
            self.latest[unit] = found
            return
        # attempts spent with no valid answer this round: an earlier round's best attempt stays
        outcome.status = "failed" if unit in self.best else "llm_error" if lost else "rejected"

    async def _judge(self, asked: list[Unit], round_number: int) -> None:
        """Verify a copy holding every pending unit's latest answer; accept what passes."""
        tree = self.work / f"round-{round_number}"
        shutil.rmtree(tree, ignore_errors=True)
        shutil.copytree(self.translated, tree, ignore=shutil.ignore_patterns("__pycache__"))
        for unit, answer in self.latest.items():
            if self.outcomes[unit].status != "pending":
                continue
            path = tree / unit.file
            spliced = splice(path.read_text(), unit, answer.code, answer.imports)
            if isinstance(spliced, SpliceError):  # two answers that cannot stand together
                self.evidence[unit] = [f"your answer could not be put in the module: {spliced.reason}"]
                asked = [u for u in asked if u != unit]
                continue
            path.write_text(spliced)
        self.progress(f"{self.package}: round {round_number}: verifying {len(asked)} answer(s)")
        report = await self._verify(tree)
        found, proof = evidence_mod.read(report, PackageIndex(tree, self.package), asked)
        journaled, self.journaled = self.journaled, set()
        self.held -= set(asked)
        for unit in asked:
            outcome, answer = self.outcomes[unit], self.latest[unit]
            outcome.evidence, outcome.proof = found[unit], proof[unit]
            if not found[unit] and proof[unit]:
                if self._write(unit, answer) is None:
                    outcome.status = "resumed" if unit in journaled else "accepted"
                    outcome.detail = f"verified: {proof[unit][0]}"
                    self._journal(unit, answer)
                continue
            if unit in journaled:
                outcome.attempts = 0  # an earlier run's answer no longer holds: ask afresh
            if not found[unit]:
                self.best[unit] = (0, answer)
                blocked = [u for u in asked if u.file == unit.file and found[u]]
                if blocked:  # nothing passed because a sibling broke the module: check it again next round
                    self.held.add(unit)
                    outcome.detail = f"not checked: {blocked[0].name} broke the module ({found[blocked[0]][0].splitlines()[0][:200]})"
                    continue
                outcome.status, outcome.detail = "unverified", "no translated test or replayed call reaches it"
                continue
            if unit not in self.best or len(found[unit]) <= self.best[unit][0]:
                self.best[unit] = (len(found[unit]), answer)
            self.evidence[unit], self.previous[unit] = found[unit], "\n".join([*answer.imports, "", answer.code]).strip()
            outcome.detail = found[unit][0].splitlines()[0][:300]
            if outcome.attempts >= self.attempts:
                outcome.status = "failed"

    def _finish(self) -> None:
        """Units not accepted keep their best attempt, under a TODO saying why."""
        for unit, outcome in self.outcomes.items():
            if outcome.status == "pending":
                outcome.status = "failed" if unit in self.best else "rejected"
            if outcome.status in ("accepted", "resumed") or unit not in self.best:
                continue
            why = {"unverified": "nothing compares it (no test or replayed call reaches it): review it",
                   "failed": f"not verified after {outcome.attempts} attempt(s): {outcome.detail}",
                   "budget": f"token budget spent; best attempt so far: {outcome.detail}",
                   "llm_error": f"the LLM failed ({outcome.detail}); best attempt so far"}.get(outcome.status, outcome.detail)
            self._write(unit, self.best[unit][1], note=f"TODO(tern): llm ({self.model.name}): {why}")

    # -- helpers ----------------------------------------------------------------------

    def _count(self, result: Completion | LLMFailure, outcome: UnitOutcome) -> None:
        """Every request's tokens, answered or not, go to the budget and the report."""
        if isinstance(result, LLMFailure) and result.cause == "budget" and not result.tokens:
            return
        self.budget.charge(result.tokens)
        outcome.tokens += result.tokens
        self.report.requests += 1
        cached = isinstance(result, Completion) and result.cached
        if not cached:
            self.report.prompt_tokens += result.usage.prompt
            self.report.completion_tokens += result.usage.completion
            self.report.counted_tokens += result.usage.total if result.usage.counted else 0
        if isinstance(result, Completion):
            self.report.answers += 1
            self.report.cached_answers += int(cached)
            self.report.stops[result.stop] = self.report.stops.get(result.stop, 0) + 1
        else:
            self.report.failures[result.cause] = self.report.failures.get(result.cause, 0) + 1

    def _write(self, unit: Unit, answer: Answer, note: str = "") -> SpliceError | None:
        path = self.translated / unit.file
        spliced = splice(path.read_text(), unit, answer.code, answer.imports, note=note)
        if isinstance(spliced, SpliceError):
            self.outcomes[unit].detail = f"could not be written: {spliced.reason}"
            return spliced
        write_atomic(path, spliced.encode())
        return None

    def _journal(self, unit: Unit, answer: Answer) -> None:
        outcome = self.outcomes[unit]
        self.cache.put(journal_key(self.original, unit, self.rule_code[unit], self.model.name), "agent", {
            "package": self.package, "file": unit.file, "name": unit.name, "kind": unit.kind,
            "code": answer.code, "imports": list(answer.imports), "model": self.model.name,
            "attempts": outcome.attempts, "tokens": outcome.tokens, "reasons": outcome.reasons,
            "proof": outcome.proof, "original": self.original_index.source(unit) if unit.file in self.original_index.files else "",
            "before": self.rule_code.get(unit, ""),
            "created": time.time()})

    async def _verify(self, tree: Path) -> PackageReport:
        started = time.perf_counter()
        async with self.sandbox_limit:
            verifier = PackageVerifier(self.original, tree, runner=self.runner, cache=self.cache, config=self.verify_config)
            report = await verifier.verify()
        self.report.phases["verify"] += time.perf_counter() - started
        return report


#: failures where the server gave no usable answer but may give one if asked again; the
#: request is spent (an attempt, its tokens), the slot given back first: the next request
#: waits its turn under the limit as it is now
ANSWER_LOST = frozenset({"timeout", "stalled", "dropped", "interrupted", "empty"})


def _imports_of(path: Path) -> str:
    try:
        text = path.read_text()
        tree = ast.parse(text)
    except (OSError, SyntaxError):
        return ""
    lines = text.splitlines()
    return "\n".join("\n".join(lines[n.lineno - 1: n.end_lineno]) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))
