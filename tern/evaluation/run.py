"""Run a suite: per case migrate, verify through the sandbox, score; cache whole cases.

Cases whose result is in the cache (``.tern/cache.sqlite``, kind ``eval-case``) are not
run at all; when every case hits, neither a migration nor the sandbox starts. The rest
are migrated (in ``jobs`` worker processes, at least one) while the sandbox starts, then verified
concurrently through one runner, as ``tern verify`` does, each job behind its own cache
entry. A case's key is a hash of its sources (and its original's), tern's code and rules,
the library versions and the options that change a result (verification config, LLM).
A case is cached only when every sandbox job of it ended normally: a crash or a
timeout is run again next time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import time
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import anyio

from tern.evaluation import scan
from tern.evaluation.llm import LlmSetup
from tern.evaluation.score import CaseResult, Translation, expectation, score
from tern.evaluation.suite import Case, Suite
from tern.verify import keys
from tern.verify.config import ConfigError, VerifyConfig, load_config

#: bump when a cached case result would be read differently
CASE_SCHEMA = 1
LIBRARIES = tuple(dict.fromkeys(keys.TF_LIBRARIES + keys.JAX_LIBRARIES))


class Progress(Protocol):
    def start(self, total: int) -> None: ...

    def update(self, case: str, message: str) -> None: ...

    def done(self, result: CaseResult) -> None: ...


class Quiet:
    def start(self, total: int) -> None:
        pass

    def update(self, case: str, message: str) -> None:
        pass

    def done(self, result: CaseResult) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class Options:
    project: Path  # whose .tern/ holds the cache and whose daemon runs the jobs
    run_dir: Path  # translations go to run_dir/translations/<suite>/<case>/<package>
    llm: LlmSetup
    use_cache: bool = True
    jobs: int = 1
    daemon: str = "auto"
    workers: int | None = None
    executor: Any = None  # an ExecutorConfig; None: this machine's pool (through the daemon per ``daemon``)


def case_config(case: Case) -> VerifyConfig:
    """The original's ``[tool.tern.verify]`` with the case's overrides on top."""
    base = load_config(case.tf_package)
    raw = dict(case.config)
    if not raw:
        return base
    changes: dict[str, Any] = {}
    try:
        for name in ("rtol", "atol", "timeout"):
            if name in raw:
                changes[name] = float(raw[name])
        if "memory_mb" in raw:
            changes["memory_mb"] = int(raw["memory_mb"])
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"case {case.id}: config: {exc}") from None
    if "keras" in raw:
        if raw["keras"] not in ("keras3", "tf_keras"):
            raise ConfigError(f"case {case.id}: config keras must be 'keras3' or 'tf_keras', not {raw['keras']!r}")
        changes["keras"] = raw["keras"]
    if "tolerances" in raw:
        changes["tolerances"] = {**base.tolerances, **dict(raw["tolerances"])}
    if "cases" in raw:
        changes["cases"] = tuple(raw["cases"])
    return dataclasses.replace(base, **changes)


def case_key(case: Case, config: VerifyConfig, llm: LlmSetup) -> str:
    settings = {k: v for k, v in dataclasses.asdict(config).items() if k != "source"}
    return keys.digest("eval-case", CASE_SCHEMA, case.kind, case.path.name, keys.tree_hash(case.path),
                       keys.tree_hash(case.original) if case.original else "", keys.tern_fingerprint(),
                       keys.versions(LIBRARIES), settings, llm.mode, llm.key())


def case_out(case: Case, run_dir: Path) -> Path:
    if case.original is not None:
        return case.path
    return run_dir / "translations" / case.suite / case.name / case.path.name


# -- migrate (in a worker process: plain values in, plain values out) -------------


def facts_from_report(report: dict, out: Path, package: str, seconds: float) -> Translation:
    """Provenance and residue from a migrate report (``RunReport.to_json``); LLM edits are
    those whose rule id starts with ``llm``."""
    edits = [e for f in report.get("files", []) for e in f.get("edits", [])]
    llm = sum(1 for e in edits if str(e.get("rule", "")).startswith("llm"))
    agent = report.get("agent") or {}
    return Translation(
        residue=int(report.get("totals", {}).get("todos", 0)),
        tf_left=scan.tensorflow_left(out) if out.is_dir() else [],
        errors=[f"{f['path']}:{f.get('error_line', 0)}: {f.get('error', '')}" for f in report.get("files", [])
                if f.get("status") == "error"],
        edits_rules=len(edits) - llm, edits_llm=llm,
        attempts=int(agent.get("attempts", 0) or 0), tokens=int(agent.get("tokens", 0) or 0),
        seconds=seconds, code_modules=sorted(scan.code_modules(out, package)) if out.is_dir() else [],
    )


def migrate_rules(source: str, out: str) -> Translation:
    """Rules only, into a fresh ``out`` (a stale module from an earlier run must not be verified)."""
    from tern.engine.runner import migrate, write_atomic

    started = time.perf_counter()
    target = Path(out)
    try:
        shutil.rmtree(target, ignore_errors=True)
        report = migrate(Path(source), target)
        text = report.to_json()
        write_atomic(target.with_name(target.name + ".tern-report.json"), text.encode())
        return facts_from_report(json.loads(text), target, target.name, time.perf_counter() - started)
    except Exception as exc:  # noqa: BLE001 - a bug in tern fails this case, not the run
        return Translation(crash=f"{type(exc).__name__}: {exc}", seconds=time.perf_counter() - started)


def _described(exc: BaseException) -> str:
    """``Type: message``; for a task group's ExceptionGroup, that of each exception it holds
    (its own message, "unhandled errors in a TaskGroup", says nothing of what went wrong)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_described(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


def migrate_with_agent(cases: list[Case], options: Options) -> dict[str, Translation]:
    """Rules for every case, then the LLM agent on what they left, sharing one budget."""
    from tern.evaluation import llm
    from tern.engine.runner import migrate, write_atomic

    done: dict[str, Translation] = {}
    reports: dict[str, tuple[Any, float]] = {}
    for case in cases:
        out, started = case_out(case, options.run_dir), time.perf_counter()
        try:
            shutil.rmtree(out, ignore_errors=True)
            reports[case.id] = (migrate(case.path, out), time.perf_counter() - started)
        except Exception as exc:  # noqa: BLE001 - a bug in tern fails this case, not the run
            done[case.id] = Translation(crash=f"{type(exc).__name__}: {exc}", seconds=time.perf_counter() - started)
    paired = [c for c in cases if c.id in reports and reports[c.id][0].exit_code != 2]
    try:
        agents = llm.run_agent([(c.path, case_out(c, options.run_dir)) for c in paired], config=options.llm.config,
                               project=options.project, daemon=options.daemon, workers=options.workers)
        if len(agents) != len(paired):
            raise RuntimeError(f"{len(agents)} agent reports for {len(paired)} packages")
    except Exception as exc:  # noqa: BLE001 - the agent's failure fails its cases (and they are not cached)
        agents = [None] * len(paired)
        failure = f"agent: {type(exc).__name__}: {exc}"
    for case in cases:
        if case.id in done:
            continue
        report, seconds = reports[case.id]
        out = case_out(case, options.run_dir)
        phases: dict[str, float] = {}
        if case in paired:
            agent = agents[paired.index(case)]
            if agent is None:
                done[case.id] = Translation(crash=failure, seconds=seconds)
                continue
            phases = llm.fold(report, agent, rules_seconds=seconds)
        text = report.to_json()
        write_atomic(out.with_name(out.name + ".tern-report.json"), text.encode())
        done[case.id] = facts_from_report(json.loads(text), out, out.name, seconds)
        done[case.id].extra_phases = phases
    return done


def translation_facts(case: Case) -> Translation:
    """A ready-made translation: what its files show."""
    return Translation(residue=scan.todo_count(case.path), tf_left=scan.tensorflow_left(case.path),
                       code_modules=sorted(scan.code_modules(case.path, case.path.name)))


# -- the run --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SuiteRun:
    """Every case's result, in suite order, and how the run went (cache hits, runner, jobs)."""

    results: list[CaseResult]
    info: dict[str, Any]


def evaluate(suites: list[Suite], options: Options, progress: Progress | None = None) -> SuiteRun:
    """Every case of ``suites``, in suite order. Raises ConfigError for a bad case config."""
    from tern.sandbox.daemon import find_project
    from tern.verify.cache import Cache

    progress = progress or Quiet()
    cases = [case for suite in suites for case in suite.cases]
    configs = {case.id: case_config(case) for case in cases}
    state = find_project(options.project) / ".tern"
    cache = Cache(state, enabled=options.use_cache)
    keyed = {case.id: case_key(case, configs[case.id], options.llm) for case in cases}
    results: dict[str, CaseResult] = {}
    info: dict[str, Any] = {"case_hits": 0, "case_misses": 0, "runner_opened": False, "daemon": False,
                            "isolation": None, "isolation_warning": "", "jobs_run": 0, "jobs_cached": 0, "runner_error": ""}
    progress.start(len(cases))
    pending = []
    for case in cases:
        hit = cache.get(keyed[case.id], "eval-case")
        if hit is None:
            pending.append(case)
            continue
        info["case_hits"] += 1
        result = CaseResult.from_dict(hit)
        result.suite, result.name, result.id, result.cached = case.suite, case.name, case.id, True
        result.jobs_run = result.jobs_cached = 0  # this run's jobs: none
        results[case.id] = _finish(result, case)
        progress.done(results[case.id])
    info["case_misses"] = len(pending)
    try:
        if pending:
            _run_pending(pending, configs, keyed, options, cache, state, results, info, progress)
    finally:
        cache.close()
    return SuiteRun([results[case.id] for case in cases], info)


def _finish(result: CaseResult, case: Case) -> CaseResult:
    result.expect = case.expect
    result.expectation = expectation(result.status, case.expect)
    return result


def _run_pending(pending: list[Case], configs: dict, keyed: dict, options: Options, cache: Any, state: Path,
                 results: dict[str, CaseResult], info: dict, progress: Progress) -> None:
    from tern.engine.runner import migrate  # noqa: F401 - imported before any fork: workers inherit it

    migrating = [c for c in pending if c.original is None]
    prepared: dict[str, Translation] = {}
    if options.llm.config is not None and migrating:  # the agent runs its own sandbox jobs first
        for case in migrating:
            progress.update(case.id, "migrating (rules, then the LLM)")
        prepared = migrate_with_agent(migrating, options)
        migrating = []
    pool, futures = start_migrations(migrating, options)
    try:
        anyio.run(_verify_all, pending, configs, keyed, options, cache, state, results, info, progress, futures, prepared)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def start_migrations(cases: list[Case], options: Options) -> tuple[ProcessPoolExecutor | None, dict[str, Future]]:
    """The rules' migration of each case, started in worker processes (``options.jobs`` of them).

    Processes, never a thread beside the event loop: CPython 3.11's ``ast`` is not
    thread-safe ("AST constructor recursion depth mismatch"), and verification parses too.
    Called before any thread starts, so the pool forks its workers from a single thread."""
    if not cases:
        return None, {}
    pool = ProcessPoolExecutor(max_workers=max(1, min(options.jobs, len(cases))))
    futures = {case.id: pool.submit(migrate_rules, str(case.path), str(case_out(case, options.run_dir))) for case in cases}
    return pool, futures


async def _verify_all(pending, configs, keyed, options: Options, cache, state, results, info, progress, futures,
                      prepared) -> None:
    from tern.sandbox.executor import open_executor
    from tern.verify.run import PackageVerifier

    ready, finished = anyio.Event(), anyio.Event()
    box: dict[str, Any] = {}

    async def hold_runner() -> None:
        try:
            async with open_executor(options.project, options.executor, daemon=options.daemon, workers=options.workers,
                                     writable_roots=(state,)) as runner:
                box["runner"] = runner
                info["runner_opened"] = True
                info["daemon"] = bool(getattr(runner, "warm_daemon", False))
                ready.set()
                await finished.wait()
                with contextlib.suppress(Exception):  # status is information only
                    status = await runner.status()
                    sandbox = status.get("sandbox") or status
                    info["isolation"] = sandbox.get("isolation")
                    info["isolation_warning"] = sandbox.get("isolation_warning", "")
                    if "executor" in status:
                        info["executor"] = status["executor"]
        except Exception as exc:  # noqa: BLE001 - every case then says why it could not be verified
            info["runner_error"] = f"{type(exc).__name__}: {exc}"
            ready.set()

    async def translate(case: Case) -> Translation:
        if case.original is not None:
            return translation_facts(case)
        if case.id in prepared:
            return prepared[case.id]
        return await anyio.to_thread.run_sync(futures[case.id].result)  # waits; the work is in a process

    async def one(case: Case) -> None:
        started = time.perf_counter()
        out = case_out(case, options.run_dir)
        result = CaseResult(id=case.id, suite=case.suite, name=case.name, kind=case.kind, source=str(case.path),
                            original=str(case.tf_package), out=str(out))
        progress.update(case.id, "migrating" if case.original is None else "reading the translation")
        translation = await translate(case)
        report, verify_error, clean = None, "", False
        if translation.crash:
            verify_error = "not run: the migration failed"
        else:
            progress.update(case.id, "verifying")
            await ready.wait()
            if "runner" not in box:
                verify_error = f"the sandbox is unavailable: {info['runner_error']}"
            else:
                verifier = PackageVerifier(case.tf_package, out, runner=box["runner"], cache=cache,
                                           config=configs[case.id], progress=lambda m: progress.update(case.id, m))
                try:
                    report = (await verifier.verify()).to_dict()
                except Exception as exc:  # noqa: BLE001 - a bug or a broken tree fails this case, not the run
                    verify_error = _described(exc)
                run = [j for j in verifier.jobs if not j["cached"]]
                info["jobs_run"] += len(run)
                info["jobs_cached"] += len(verifier.jobs) - len(run)
                clean = not verify_error and all(j.get("cause") == "ok" for j in run)
                result.jobs_run, result.jobs_cached = len(run), len(verifier.jobs) - len(run)
        score(result, translation, report, verify_error)
        result.seconds = round(time.perf_counter() - started, 4)
        if clean or (translation.crash and not translation.crash.startswith("agent")):
            cache.put(keyed[case.id], "eval-case", result.to_dict())
        results[case.id] = _finish(result, case)
        progress.done(result)

    async with anyio.create_task_group() as group:
        group.start_soon(hold_runner)
        async with anyio.create_task_group() as cases_group:
            for case in pending:
                cases_group.start_soon(one, case)
        finished.set()
