"""Warm worker pools behind one async ``Sandbox.run(job) -> JobResult``.

Workers of a kind start on the first job of that kind (a JAX-only run never pays for
TensorFlow), up to ``workers`` per kind; further jobs wait for a free one. While a job
runs, a watchdog polls the worker's process tree and ends the job (killing the whole
tree) on its wall-time, memory or CPU limit or on a fork bomb; the worker's own RLIMIT_CPU
usually ends a CPU spin first. A worker that ended badly is replaced in the background,
and one that has served ``recycle_after`` jobs is retired, so leaks inside it stay bounded.
Every path ends in a ``JobResult``; exceptions are left for bugs.

Tern's state is never the job's to write: the state directory (the cache, recordings,
links, every worker's scratch) and the daemon's runtime directory are mounted read-only
into every worker, even under a writable root, and the pool itself publishes what a job
made for later jobs (``Job.output``), after the job, by rename.
"""

from __future__ import annotations

import collections
import errno
import os
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from tern.sandbox import isolation, procfs
from tern.sandbox.daemon import private_dir
from tern.sandbox.handle import StartFailed, WorkerHandle
from tern.sandbox.jobs import OUTPUT, Job, JobResult
from tern.sandbox.shared_state import JAX_CACHE_ENV, RECORDINGS_ENV, shared_dir
from tern.sandbox.worker import JOB_OUTPUT, remove_path

# tf_keras: TensorFlow with legacy Keras 2 as tf.keras; jax_tfdata: JAX plus TensorFlow for
# tf.data input pipelines (Keras unimportable), for translations that keep tf.data
KINDS = ("tf", "tf_keras", "jax", "jax_tfdata")
_TERN_ROOT = str(Path(__file__).resolve().parents[2])  # the worker runs this same tern
# Under the state directory, the only place a writable root reaches: ``tern weights`` stages
# a port in weights/<id>/ (verify/weights_cmd.py, which asks for the whole state directory).
SHARED_OUTPUTS = ("weights",)


@dataclass
class _Kind:
    """The workers of one kind. Each running job holds one of ``slots``."""

    slots: anyio.Semaphore
    idle: list[WorkerHandle] = field(default_factory=list)
    busy: set[WorkerHandle] = field(default_factory=set)
    starting: int = 0
    served: int = 0
    restarts: int = 0
    recycled: int = 0
    ends: collections.Counter = field(default_factory=collections.Counter)
    start_seconds: list[float] = field(default_factory=list)
    last_start_error: str = ""

    @property
    def total(self) -> int:
        return len(self.idle) + len(self.busy) + self.starting


class Sandbox:
    """Run jobs in warm, isolated worker processes; use as ``async with Sandbox(state_dir) as sb``.

    ``writable_roots`` are bound writable into every worker when it starts (bubblewrap
    cannot add mounts later), so a job's ``writable`` directories must lie under one of them.
    Tern's own state stays read-only inside them: a root that holds ``state_dir`` (or is it)
    reaches only its ``SHARED_OUTPUTS`` there; a root inside the state directory or the
    daemon's runtime directory is ignored unless it lies in a shared output.
    """

    def __init__(self, state_dir: Path, *, workers: int | None = None, keras: str = "keras3",
                 isolation: str = "auto", writable_roots: tuple[Path, ...] = (), recycle_after: int = 200):
        self.state_dir = Path(state_dir).resolve()
        self.size = workers or os.cpu_count() or 1
        self.keras = keras
        self.recycle_after = recycle_after
        self.writable_roots = tuple(Path(p).resolve() for p in writable_roots)
        #: the TF results projects share (``TERN_RECORDINGS``), when set: jobs read them, never write
        self.shared_outputs = tuple(filter(None, [shared_dir(RECORDINGS_ENV)]))
        self.protected = (self.state_dir, Path(private_dir()).resolve(), *self.shared_outputs)
        self.job_roots = self._job_roots()
        self.level = ""
        self._requested = isolation
        self._kinds: dict[str, _Kind] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False
        self._started_jobs = 0  # jobs handed to workers so far: which worker ran a task last
        self._live: set[WorkerHandle] = set()  # every spawned worker not yet closed

    async def __aenter__(self) -> "Sandbox":
        self.level = await anyio.to_thread.run_sync(isolation.detect, self._requested)
        # the shared recordings too: a directory made after the workers' mounts would not be read-only to them
        for path in (self._scratch, self.jax_cache, *self.job_roots, *self.shared_outputs):
            path.mkdir(parents=True, exist_ok=True)
        procfs.kill_orphans(f"{self._scratch}{os.sep}")  # left by a tern killed mid start-up
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        """Kill running jobs (their ``run`` returns "cancelled"), stop idle workers, reap all."""
        self._closed = True
        idle = {w for kind in self._kinds.values() for w in kind.idle}
        for worker in self._live - idle:
            worker.kill("cancelled", "the sandbox was closed while the job ran")
        assert self._tg is not None
        self._tg.cancel_scope.cancel()  # replacements still starting, retirements in progress
        await self._tg.__aexit__(None, None, None)
        with anyio.CancelScope(shield=True):
            while self._live:
                async with anyio.create_task_group() as tg:
                    for worker in list(self._live):
                        tg.start_soon(worker.close)

    @property
    def _scratch(self) -> Path:
        return self.state_dir / "scratch"

    @property
    def jax_cache(self) -> Path:
        """XLA's compilation cache: the project's own, or one that projects share (``TERN_JAX_CACHE``,
        ``shared_state.py``)."""
        return shared_dir(JAX_CACHE_ENV) or self.state_dir / "jax-cache"

    async def run(self, job: Job) -> JobResult:
        """Run ``job`` on a free worker of its kind; safe to call from many tasks at once."""
        if self._tg is None:
            raise RuntimeError("Sandbox.run() outside 'async with Sandbox(...)'")
        if self._closed:
            return JobResult("cancelled", error="the sandbox is closed")
        if problem := self._invalid(job):
            return JobResult("error", error=problem)
        kind = self._kind(job.kind)
        async with kind.slots:
            worker = await self._take(job.kind, kind, job)
            if self._closed and isinstance(worker, WorkerHandle):
                await worker.close()
            if self._closed:
                return JobResult("cancelled", error="the sandbox was closed before the job ran")
            if isinstance(worker, JobResult):
                return worker
            kind.busy.add(worker)
            self._started_jobs += 1
            worker.ran[(job.task, job.sys_path)] = self._started_jobs
            try:
                result = await worker.run(job)
                result = await self._collect(worker, job, result)
            finally:
                kind.busy.discard(worker)
                self._give_back(job.kind, kind, worker)
        kind.served += 1
        kind.ends[result.cause] += 1
        return result

    async def warm(self, *kinds: str) -> None:
        """Start every worker of ``kinds`` (default: jax) now rather than on first use."""
        async with anyio.create_task_group() as tg:
            for name in kinds or ("jax",):
                for _ in range(self.size):
                    tg.start_soon(self._refill, name)

    def status(self) -> dict[str, Any]:
        kinds = {}
        for name, kind in self._kinds.items():
            workers = [{"pid": w.pid, "busy": w in kind.busy, "jobs": w.jobs, "scratch": str(w.root)}
                       for w in [*kind.busy, *kind.idle]]
            kinds[name] = {
                "workers": workers, "busy": len(kind.busy), "idle": len(kind.idle), "starting": kind.starting,
                "jobs_served": kind.served, "restarts": kind.restarts, "recycled": kind.recycled,
                "ends": dict(kind.ends), "start_seconds": [round(s, 2) for s in kind.start_seconds[-10:]],
                "last_start_error": kind.last_start_error,
            }
        return {"isolation": self.level, "isolation_warning": isolation.warning(self.level),
                "workers_per_kind": self.size, "kinds": kinds}

    def _job_roots(self) -> tuple[Path, ...]:
        """The directories bound writable for jobs: ``writable_roots`` with tern's state carved out."""
        shared = [self.state_dir / name for name in SHARED_OUTPUTS]
        roots: list[Path] = []
        for root in self.writable_roots:
            if _under(self.state_dir, root):
                roots += ([] if root == self.state_dir else [root]) + shared
            elif any(_under(root, protected) for protected in self.protected):
                roots += [root] if any(_under(root, s) for s in shared) else []
            else:
                roots.append(root)
        return tuple(dict.fromkeys(roots))

    def _may_write(self, path: Path) -> bool:
        """What the mounts say: the deepest of the job roots and protected directories holding ``path`` decides."""
        holders = [(len(r.parts), True) for r in self.job_roots if _under(path, r)]
        holders += [(len(p.parts), False) for p in self.protected if _under(path, p)]
        return bool(holders) and max(holders, key=lambda h: (h[0], not h[1]))[1]

    def _invalid(self, job: Job) -> str:
        if job.kind not in KINDS:
            return f"unknown worker kind {job.kind!r}; expected one of {KINDS}"
        for directory in job.writable:
            if not self._may_write(Path(os.path.realpath(directory))):
                roots = ", ".join(map(str, self.job_roots)) or "none configured"
                return (f"writable directory {directory} is not under the sandbox's writable roots ({roots}); "
                        "pass its parent in Sandbox(writable_roots=...) (tern's own state is never writable)")
        if job.output and not os.path.isabs(job.output):
            return f"output {job.output!r} must be an absolute path"
        return ""

    async def _collect(self, worker: WorkerHandle, job: Job, result: JobResult) -> JobResult:
        """Publish the job's ``OUTPUT`` directory at ``job.output`` if it ended "ok"; discard it otherwise."""
        handed = worker.root / JOB_OUTPUT
        if not (job.output and result.ok):
            await anyio.to_thread.run_sync(remove_path, handed)
            return result
        try:
            await anyio.to_thread.run_sync(publish, handed, Path(job.output))
        except (OSError, ValueError) as error:
            await anyio.to_thread.run_sync(remove_path, handed)
            return JobResult("error", error=f"the job's {OUTPUT} directory was not published: {error}",
                             output=result.output, seconds=result.seconds, worker=result.worker)
        return result

    def _kind(self, name: str) -> _Kind:
        if name not in self._kinds:
            self._kinds[name] = _Kind(anyio.Semaphore(self.size))
        return self._kinds[name]

    async def _take(self, name: str, kind: _Kind, job: Job) -> WorkerHandle | JobResult:
        # Affinity: a worker that ran the same task on the same paths before has that
        # code's JAX traces and compiled primitives in memory; re-verifying is much faster there.
        # The one that ran it last holds what the previous job kept (``between_jobs.py``).
        last = {index: c.ran.get((job.task, job.sys_path), 0) for index, c in enumerate(kind.idle) if c.alive}
        if last and max(last.values()):
            index = max(last, key=last.__getitem__)
            kind.idle.append(kind.idle.pop(index))
        while kind.idle:
            worker = kind.idle.pop()
            if worker.alive:
                return worker
            kind.restarts += 1
            self._retire(worker)
        try:
            return await self._start(name, kind)
        except StartFailed as failure:
            return JobResult("crash", error=f"worker failed to start: {failure}")

    def _give_back(self, name: str, kind: _Kind, worker: WorkerHandle) -> None:
        if worker.alive and worker.jobs < self.recycle_after and not self._closed:
            kind.idle.append(worker)
            return
        if self._closed:
            return  # __aexit__ closes it
        if worker.alive:
            kind.recycled += 1
        else:
            kind.restarts += 1
        self._retire(worker)
        assert self._tg is not None
        self._tg.start_soon(self._refill, name)

    def _retire(self, worker: WorkerHandle) -> None:
        assert self._tg is not None
        self._tg.start_soon(worker.close)

    async def _refill(self, name: str) -> None:
        """Bring the kind back to ``size`` workers: replacements and ``warm`` start ahead of need."""
        kind = self._kind(name)
        async with kind.slots:
            if self._closed or kind.total >= self.size:
                return
            try:
                worker = await self._start(name, kind)
            except StartFailed:
                return  # recorded in status; the next job of this kind tries again and reports it
            kind.idle.append(worker)

    async def _start(self, name: str, kind: _Kind) -> WorkerHandle:
        if self._closed:
            raise StartFailed("the sandbox is closed")
        root = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self._scratch))
        worker_kind, keras = ("tf", "tf_keras") if name == "tf_keras" else (name, self.keras)
        argv = [*isolation.launcher(self.level, writable=[root, self.jax_cache, *self.job_roots],
                                    readonly=self.protected),
                sys.executable, "-m", "tern.sandbox.worker", "--kind", worker_kind, "--scratch-root", str(root),
                "--keras", keras, "--jax-cache", str(self.jax_cache)]
        if isolation.pid_namespace(self.level):
            argv.append("--pid-namespace")
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1",
                   PYTHONPATH=os.pathsep.join(filter(None, [_TERN_ROOT, os.environ.get("PYTHONPATH")])))
        env.pop("TF_USE_LEGACY_KERAS", None)  # the worker sets it from --keras
        kind.starting += 1
        try:
            worker = await WorkerHandle.start(name, argv, root, env, self._live)
        except StartFailed as failure:
            kind.last_start_error = str(failure)
            raise
        finally:
            kind.starting -= 1
        kind.start_seconds.append(worker.start_seconds)
        return worker


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def publish(source: Path, target: Path) -> None:
    """Rename a job's output directory to ``target``, once it holds only directories and
    regular files of its own (no links out, no hard links to files elsewhere, no FIFOs)."""
    if not os.path.lexists(source):
        return  # the job made none
    if source.is_symlink() or not source.is_dir():
        raise ValueError(f"{OUTPUT} is not a directory")
    for folder, dirs, files in os.walk(source):
        for name in dirs + files:
            info = os.lstat(os.path.join(folder, name))
            if not (stat.S_ISDIR(info.st_mode) or (stat.S_ISREG(info.st_mode) and info.st_nlink == 1)):
                raise ValueError(f"{os.path.join(folder, name)} is not a plain file or directory")
    try:
        os.rename(source, target)
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
        staging = target.with_name(f".{target.name}.{os.getpid()}")
        shutil.copytree(source, staging)
        os.rename(staging, target)
        shutil.rmtree(source, ignore_errors=True)
