"""Verify one translated package against its TF original, through the sandbox.

Five kinds of job, each cached under its own key (``keys.py``):

1. *record* (TF worker): the original tests run under the recorder; one job per TF
   package version, its cases kept in ``.tern/recordings/<key>/`` (written in the job's
   scratch directory, moved there by the sandbox: jobs never write tern's state);
2. *replay* (JAX worker): one job per translated source module: import it, replay the
   cases of the layers it defines; cases off on values alone, beyond the translation's own
   float32 rounding, are replayed once more against a *reference* job (TF worker): Keras
   itself in float64 (``reference.py``); cases found equal are then *searched* beyond the
   probes, in rounds of a JAX and a TF job (``search.py``, ``search_run.py``);
3. *train* (JAX worker): one job per translated module defining a training step the
   tests called: replay the recorded N-step trajectories (``step_replay.py``);
4. *tests* (JAX worker): one job per translated test file.

Tests jobs start at once, alongside the recording; replays and trains start when it is done.
"""

from __future__ import annotations

import functools
import os
import shutil
import time
from pathlib import Path
from typing import Any

import anyio

from tern.features.tf_data.kept import tree_keeps_only_allowed_tf
from tern.sandbox.jobs import Job, JobResult
from tern.status import Status
from tern.verify import keys
from tern.verify.cache import Cache
from tern.verify.config import VerifyConfig
from tern.verify.record import imported_modules, is_test_file, package_modules
from tern.verify.report import JobAnswer, PackageReport, build_rows
from tern.verify.static_defaults import compared_by_replay, static_default_checks
from tern.verify.init_run import inits_module, inits_steps
from tern.verify.search_run import search_module
from tern.verify.step_report import training_summary


def link_root(state_dir: Path, target: Path, package: str) -> Path:
    """A directory holding only ``package`` -> ``target``, to put on ``sys.path``: the
    translation's parent directory may hold anything, and the import name must be the
    package's own whatever the output directory is called."""
    root = state_dir / "links" / keys.digest(str(target.resolve()), package)[:16]
    link = root / package
    if link.is_symlink() and os.readlink(link) == str(target.resolve()):
        return root
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{package}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target.resolve(), target_is_directory=True)
    os.replace(tmp, link)
    return root


def test_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if is_test_file(p) and p.name != "conftest.py"
                  and "__pycache__" not in p.parts)


class PackageVerifier:
    def __init__(self, original: Path, translated: Path, *, runner: Any, cache: Cache, config: VerifyConfig,
                 progress: Any = None):
        self.original = original.resolve()
        self.translated = translated.resolve()
        self.package = self.original.name
        self.runner = runner
        self.cache = cache
        self.config = config
        self.progress = progress or (lambda message: None)
        self.phases: dict[str, float] = {"record": 0.0, "replay": 0.0, "tests": 0.0}
        self.jobs: list[dict] = []

    @functools.cached_property
    def jax_kind(self) -> str:
        """``jax_tfdata`` when the translation imports TensorFlow for allowed uses alone
        (tf.data, ``rules/allowed/``): TF importable, Keras never; else ``jax``, so TF's
        memory is paid only when needed and any other TF left fails to import."""
        return "jax_tfdata" if tree_keeps_only_allowed_tf(self.translated) else "jax"

    def _jax_versions(self) -> tuple:
        """What the JAX jobs' results depend on: TensorFlow too when tf.data runs in them."""
        if self.jax_kind == "jax":
            return keys.versions(keys.JAX_LIBRARIES)
        return self.jax_kind, keys.versions(keys.JAX_LIBRARIES + keys.TF_LIBRARIES)

    def _job(self, kind: str, task: str, payload: dict, sys_path: Path, output: str = "") -> Job:
        kind = self.jax_kind if kind == "jax" else kind
        return Job(kind=kind, task=task, payload=payload, sys_path=(str(sys_path),), output=output,
                   timeout=self.config.timeout, cpu_seconds=self.config.timeout * 2, memory_mb=self.config.memory_mb)

    async def _run(self, phase: str, key: str | None, job: Job) -> JobAnswer:
        """Only successful jobs are cached."""
        cached = self.cache.get(key, phase) if key else None
        if cached is not None:
            self.jobs.append({"phase": phase, "cached": True, "seconds": 0.0})
            return JobAnswer(cached, None, True)
        started = time.perf_counter()
        result = await self.runner.run(job)
        elapsed = time.perf_counter() - started
        self.phases[phase] += result.seconds  # time in the worker, not queued behind other jobs
        self.jobs.append({"phase": phase, "cached": False, "seconds": round(result.seconds, 4),
                          "wall": round(elapsed, 4), "cause": result.cause})
        if not result.ok:
            return JobAnswer(None, result, False)
        return JobAnswer(result.value, None, False)

    # -- the three kinds of job -----------------------------------------------------------

    async def record(self) -> tuple[dict | None, JobResult | None]:
        tf_root = link_root(self.cache.state_dir, self.original, self.package)
        key = keys.digest("record", keys.versions(keys.TF_LIBRARIES), keys.tern_fingerprint(),
                          keys.tree_hash(self.original), self.config.keras, list(self.config.cases), self.config.train_steps)
        recordings = self.cache.recordings_for("record")
        final = recordings / key
        if final.is_dir():
            cached = self.cache.get(key, "record")
            if cached is not None:
                return {**cached, "dir": str(final)}, None
        recordings.mkdir(parents=True, exist_ok=True)
        partial = recordings / f"{key}.partial-{os.getpid()}-{time.monotonic_ns()}"
        tests = [str(p.relative_to(tf_root)) for p in test_files(tf_root / self.package)]
        payload = {"root": str(tf_root), "package": self.package, "tests": tests,
                   "keras": self.config.keras, "config_cases": list(self.config.cases), "train_steps": self.config.train_steps}
        kind = "tf_keras" if self.config.keras == "tf_keras" else "tf"
        # the job writes its cases into its scratch directory; the sandbox renames them to `partial`
        job = self._job(kind, "tern.verify.tasks:record_tests", payload, tf_root, output=str(partial))
        self.progress(f"{self.package}: recording the original tests")
        value, failure, _ = await self._run("record", None, job)
        if failure is not None:
            shutil.rmtree(partial, ignore_errors=True)
            return None, failure
        partial.mkdir(parents=True, exist_ok=True)  # a package with no recorded calls
        try:
            os.replace(partial, final)
        except OSError:  # another run finished the same recording first
            shutil.rmtree(partial, ignore_errors=True)
        self.cache.put(key, "record", value)
        return {**value, "dir": str(final)}, None

    async def replay(self, module: str, cases: list[dict], recording_dir: str, jax_root: Path) -> JobAnswer:
        """Replay ``module``'s cases; those that fail on values alone, beyond the translation's
        float32 rounding, are replayed again against a Keras float64 reference (``reference.py``)."""
        path = keys.module_file(jax_root / self.package, self.package, module)
        closure = keys.closure_hash(path, jax_root / self.package, self.package) if path else "missing"  # once: it reads files
        value, failure, hit = await self._replay_job(module, cases, recording_dir, jax_root, closure)
        for wants, make in (("wants_reference", self.reference), ("wants_samples", self.samples)):
            wanting = [c["id"] for c in (value or {}).get("cases", []) if c.get(wants)]
            made = await make(recording_dir, wanting) if wanting else ""
            if made:
                again, _, again_hit = await self._replay_job(module, [c for c in cases if c["id"] in wanting], recording_dir,
                                                             jax_root, closure, **{wants.removeprefix("wants_"): made})
                if again is not None and not again.get("import_error"):  # else the first verdict stands
                    judged = {c["id"]: c for c in again["cases"]}
                    value, hit = {**value, "cases": [judged.get(c["id"], c) for c in value["cases"]]}, hit and again_hit
        if value is None or value.get("import_error"):
            return JobAnswer(value, failure, hit)
        tf_root = link_root(self.cache.state_dir, self.original, self.package)
        checked: dict[str, dict] = {}

        async def inits() -> None:
            checked["inits"] = await inits_module(self, module, value, recording_dir, jax_root, closure)

        async def search() -> None:
            checked["search"] = await search_module(self, module, value, recording_dir, jax_root, tf_root, closure)

        async with anyio.create_task_group() as group:  # neither needs the other: side by side on the workers
            group.start_soon(inits)
            group.start_soon(search)
        return JobAnswer(both_checks(checked["inits"], checked["search"]), failure, hit)

    async def _replay_job(self, module: str, cases: list[dict], recording_dir: str, jax_root: Path,
                          closure: str, reference: str = "", samples: str = "") -> JobAnswer:
        payload_cases = [{"dir": recording_dir, "id": c["id"], "tolerance": self.config.tolerance(c["target"]),
                          "reference": reference, "samples": samples} for c in cases]
        key = keys.digest("replay", self._jax_versions(), keys.tern_fingerprint(), module, closure,
                          [(c["id"], c["tolerance"]) for c in payload_cases], Path(recording_dir).name, self.config.memory_mb,
                          Path(reference).name if reference else "", Path(samples).name if samples else "")
        job = self._job("jax", "tern.verify.tasks:replay_module",
                        {"module": module, "cases": payload_cases, "memory_mb": self.config.memory_mb}, jax_root)
        value, failure, hit = await self._run("replay", key, job)
        if value is not None and not hit:
            self.cache.put(key, "replay", value)
        return JobAnswer(value, failure, hit)

    async def reference(self, recording_dir: str, ids: list[str]) -> str:
        """The directory of the Keras float64 runs of recorded cases ``ids`` (``reference.py``),
        or "" when none could be made."""
        return await self._keras_again("reference", "reference_float64", recording_dir, ids,
                                       f"Keras in float64 for {len(ids)} case(s) off beyond float32 rounding")

    async def samples(self, recording_dir: str, ids: list[str]) -> str:
        """The directory of Keras's many runs of recorded cases ``ids`` whose draws the
        translation did not take (``sample_calls.py``), or "" when none could be made."""
        return await self._keras_again("samples", "sample_calls", recording_dir, ids,
                                       f"Keras run many times for {len(ids)} case(s) the translation draws otherwise in")

    async def _keras_again(self, phase: str, task: str, recording_dir: str, ids: list[str], message: str) -> str:
        """The output directory of a TF job over recorded cases (``keras_runs``), or "" when
        it made nothing."""
        made, _ = await self.keras_runs(phase, task, recording_dir, ids, message)
        return made

    async def keras_runs(self, phase: str, task: str, recording_dir: str, ids: list[str], message: str
                         ) -> tuple[str, dict[str, str]]:
        """A TF job over recorded cases, its output directory kept beside the recordings and
        cached by the recording, the cases and tern's code: ``(directory or "", per id "ok"
        or why nothing was made for it)``."""
        key = keys.digest(phase, keys.versions(keys.TF_LIBRARIES), keys.tern_fingerprint(),
                          Path(recording_dir).name, sorted(ids), self.config.keras)
        final = self.cache.recordings_for(phase) / key
        cached = self.cache.get(key, phase) if final.is_dir() else None
        if cached is None:
            tf_root = link_root(self.cache.state_dir, self.original, self.package)
            final.parent.mkdir(parents=True, exist_ok=True)
            partial = final.with_name(f"{key}.partial-{os.getpid()}-{time.monotonic_ns()}")
            kind = "tf_keras" if self.config.keras == "tf_keras" else "tf"
            job = self._job(kind, f"tern.verify.tasks:{task}",
                            {"dir": recording_dir, "cases": sorted(ids), "keras": self.config.keras}, tf_root, output=str(partial))
            self.progress(f"{self.package}: {message}")
            self.phases.setdefault(phase, 0.0)
            cached, failure, _ = await self._run(phase, None, job)
            if failure is not None:
                shutil.rmtree(partial, ignore_errors=True)
                return "", {}
            partial.mkdir(parents=True, exist_ok=True)
            try:
                os.replace(partial, final)
            except OSError:  # another run made the same output first
                shutil.rmtree(partial, ignore_errors=True)
            self.cache.put(key, phase, cached)
        return str(final) if "ok" in cached["cases"].values() else "", cached["cases"]

    async def train(self, module: str, cases: list[dict], recording_dir: str, jax_root: Path) -> JobAnswer:
        """Replay the recorded training steps of ``module``; keyed on the step's module and the
        modules that define the models it trained, each with what they import."""
        root = jax_root / self.package
        closures = {}
        for name in sorted({module, *(c["origin_module"] for c in cases)}):
            path = keys.module_file(root, self.package, name)
            closures[name] = keys.closure_hash(path, root, self.package) if path else "missing"
        payload_cases = [{"dir": recording_dir, "id": c["id"], "tolerance": self.config.train_tolerance()} for c in cases]
        key = keys.digest("train", self._jax_versions(), keys.tern_fingerprint(), module, closures,
                          [(c["id"], c["tolerance"]) for c in payload_cases], Path(recording_dir).name)
        job = self._job("jax", "tern.verify.tasks:replay_steps", {"cases": payload_cases}, jax_root)
        self.phases.setdefault("train", 0.0)
        value, failure, hit = await self._run("train", key, job)
        if value is not None and not hit:
            self.cache.put(key, "train", value)
        if value is not None:
            value = await inits_steps(self, module, value, recording_dir, jax_root, closures)
        return JobAnswer(value, failure, hit)

    async def tests(self, test_file: Path, jax_root: Path) -> JobAnswer:
        rel = str(test_file.relative_to(jax_root))
        key = keys.digest("tests", self._jax_versions(), keys.tern_fingerprint(), rel,
                          keys.closure_hash(test_file, jax_root / self.package, self.package))
        job = self._job("jax", "tern.verify.tasks:translated_tests", {"root": str(jax_root), "files": [rel]}, jax_root)
        value, failure, hit = await self._run("tests", key, job)
        if value is not None and not hit:
            self.cache.put(key, "tests", value)
        return JobAnswer(value, failure, hit)

    async def one_test(self, test_file: Path, name: str) -> JobResult:
        """Run one translated test (``name`` a pytest node id within ``test_file``, e.g.
        ``test_forward`` or ``TestModel::test_forward``), uncached: ``tern mcp``'s run_test."""
        jax_root = link_root(self.cache.state_dir, self.translated, self.package)
        rel = f"{self.package}/{test_file.relative_to(self.translated).as_posix()}"
        payload = {"root": str(jax_root), "files": [rel], "select": [f"{rel}::{name}"]}
        return await self.runner.run(self._job("jax", "tern.verify.tasks:translated_tests", payload, jax_root))

    # -- the whole package ----------------------------------------------------------------

    async def verify(self) -> PackageReport:
        started = time.perf_counter()
        jax_root = link_root(self.cache.state_dir, self.translated, self.package)
        modules = package_modules(jax_root, self.package)
        tests_out: dict[str, tuple] = {}
        replays: dict[str, tuple] = {}
        trains: dict[str, tuple] = {}
        recording: dict = {}

        async def run_tests(path: Path) -> None:
            tests_out[str(path.relative_to(jax_root / self.package))] = await self.tests(path, jax_root)

        async def record_then_replay() -> None:
            value, failure = await self.record()
            recording["value"], recording["failure"] = value, failure
            by_module: dict[str, list[dict]] = {m: [] for m in modules}
            for case in (value or {}).get("cases", []):
                by_module.setdefault(case["target"].partition(":")[0], []).append(case)
            steps_by_module: dict[str, list[dict]] = {}
            for case in (value or {}).get("steps", []):
                steps_by_module.setdefault(case["target"].partition(":")[0], []).append(case)
            async with anyio.create_task_group() as group:
                # Replays with cases first: each is followed by its inits and search, while one
                # without cases only imports its module. A kind's jobs get workers in the order
                # they come, so the replays others wait on must come first.
                for module, cases in sorted(by_module.items(), key=lambda item: not item[1]):
                    async def one(module=module, cases=cases) -> None:
                        replays[module] = await self.replay(module, cases, (value or {}).get("dir", ""), jax_root)
                    group.start_soon(one)
                for module, cases in steps_by_module.items():
                    async def steps(module=module, cases=cases) -> None:
                        trains[module] = await self.train(module, cases, (value or {}).get("dir", ""), jax_root)
                    group.start_soon(steps)

        async with anyio.create_task_group() as group:
            group.start_soon(record_then_replay)
            for path in test_files(jax_root / self.package):
                group.start_soon(run_tests, path)
        imports = {rel: imported_modules(jax_root / self.package / rel, jax_root, self.package, modules) for rel in tests_out}
        replayed = compared_by_replay(case for value, _, _ in replays.values() if value for case in value.get("cases", []))
        defaults = static_default_checks(self.original, jax_root / self.package, modules, replayed)
        rows = build_rows(self.package, modules, replays, tests_out, recording.get("value"), recording.get("failure"), trains,
                          imports, defaults)
        return PackageReport(
            package=self.package, original=str(self.original), translated=str(self.translated), rows=rows,
            original_tests=(recording.get("value") or {}).get("tests", {}).get("tests", {}),
            record_error=_describe_failure(recording.get("failure")),
            skipped=(recording.get("value") or {}).get("skipped", {}),
            training=training_summary(rows, (recording.get("value") or {}).get("steps_not_compared", {})),
            phases={k: round(v, 4) for k, v in self.phases.items()},
            seconds=round(time.perf_counter() - started, 4),
            cached_jobs=sum(1 for j in self.jobs if j["cached"]), jobs=len(self.jobs),
        )


def both_checks(inited: dict, searched: dict) -> dict:
    """The search's cases with the initial weights' findings added: each check started from
    the same replay result, and either one's mismatch makes the case a mismatch."""
    by_id = {case["id"]: case for case in inited.get("cases", [])}
    cases = []
    for case in searched.get("cases", []):
        other = by_id.get(case["id"], {})
        merged = {**case, **{k: other[k] for k in ("init", "init_notes", "init_earlier") if k in other}}
        if other.get("status") == Status.MISMATCH:
            merged["status"] = Status.MISMATCH
        cases.append(merged)
    return {**searched, "cases": cases}


def _describe_failure(result: JobResult | None) -> str:
    if result is None:
        return ""
    return f"{result.cause}: {result.error.strip().splitlines()[-1] if result.error.strip() else ''}"
