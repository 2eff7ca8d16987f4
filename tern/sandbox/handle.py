"""The pool's side of one worker process: start it, run a job on it, end it.

Everything that can end a job early lives here, because it all comes down to one move:
record why, then kill the worker's whole process tree. The reply that then never comes
is turned into a ``JobResult`` carrying that reason, or, when the worker died on its own,
the signal that killed it.
"""

from __future__ import annotations

import dataclasses
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

from tern.sandbox import procfs
from tern.sandbox.jobs import Cause, Job, JobResult
from tern.sandbox.worker import OUTPUT_FILE, OUTPUT_TAIL

START_TIMEOUT = 120.0  # seconds to the "ready" frame; TensorFlow alone can take 8 s on a loaded machine
CLOSE_GRACE = 5.0  # seconds an idle worker gets to exit after its stdin closes
REAP_GRACE = 5.0  # seconds a launcher gets to reap its killed worker and exit before it is killed too
POLL = 0.05  # seconds between watchdog looks at a running job
SCAN_EVERY = 4  # polls between full /proc scans for processes the job forked
MAX_FORKED = 16  # processes a job may have started (past the audit hook) before it counts as a fork bomb
CPU_GRACE = 2.0  # seconds over the CPU limit before the watchdog acts, if SIGXCPU did not

_HEADER = struct.Struct(">I")
_STREAM_ENDS = (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError, anyio.BrokenResourceError)


class StartFailed(Exception):
    """The worker exited or hung before saying it was ready; the message carries its stderr tail."""


class WorkerHandle:
    def __init__(self, kind: str, process: anyio.abc.Process, root: Path, live: set["WorkerHandle"]):
        self.kind, self.process, self.root = kind, process, root
        self.stream = BufferedByteReceiveStream(process.stdout)
        self.live = live  # the pool's registry of spawned, unclosed workers
        self.chain = [process.pid]  # launcher(s) then the worker, found once it is ready
        self.jobs = 0
        # (task, sys_path) of its jobs -> when it last ran one (the pool's count): pool affinity
        self.ran: dict[tuple[str, tuple[str, ...]], int] = {}
        self.start_seconds = 0.0
        self.ended: tuple[Cause, str] | None = None  # why the pool ended the current job
        self.forked = False  # the watchdog saw processes the current job started
        self._waiting = anyio.CancelScope()  # the wait for the current job's reply
        live.add(self)

    @property
    def pid(self) -> int:
        """The worker's pid as the host sees it (inside bwrap it calls itself 2)."""
        return self.chain[-1]

    @property
    def alive(self) -> bool:
        return self.process.returncode is None and self.ended is None

    @classmethod
    async def start(cls, kind: str, argv: list[str], root: Path, env: dict[str, str],
                    live: set["WorkerHandle"]) -> "WorkerHandle":
        started = time.monotonic()
        try:
            # shielded: a cancellation delivered once the process exists but before it is ours
            # would leave it running with no handle to kill and reap it
            with open(root / "worker.log", "wb") as log, anyio.CancelScope(shield=True):
                process = await anyio.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                                   cwd=root, env=env, start_new_session=True)
        except OSError as error:
            _remove_tree(root)
            raise StartFailed(f"could not launch {argv[0]}: {error}") from error
        worker = cls(kind, process, root, live)
        ready, why = None, "start-up was cancelled"
        try:
            with anyio.move_on_after(START_TIMEOUT) as deadline:
                ready = await worker._receive()
            why = f"no ready frame within {START_TIMEOUT:g} s" if deadline.cancelled_caught else "worker exited"
        finally:
            if ready is None:
                worker.kill("crash", why)
                log = worker.log_tail
                await worker.close()
        if ready is None:
            raise StartFailed(f"{why} (status {worker.process.returncode}): {log}")
        worker.chain = procfs.chain(process.pid)
        worker.start_seconds = time.monotonic() - started
        return worker

    async def run(self, job: Job) -> JobResult:
        """Run one job; every way it can end becomes a ``JobResult``. Cancellation kills the worker."""
        self.jobs += 1
        self.ended, self.forked = None, False
        started = time.monotonic()
        reply = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch, job, procfs.cpu_seconds(self.pid))
                with anyio.move_on_after(job.timeout) as self._waiting:
                    reply = await self._exchange(job)
                if self._waiting.cancelled_caught and self.ended is None:
                    self.kill("timeout", f"job exceeded its wall-time limit of {job.timeout:g} s")
                tg.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            self.kill("cancelled", "the task awaiting the job was cancelled")
            await self._reap()
            raise
        if reply is not None:
            if self.forked:  # whatever it started may still run: retire the worker and its whole tree
                self.kill("crash", "the job left processes behind")
            return dataclasses.replace(JobResult.from_json(reply.decode()), worker=self.pid)
        returncode = await self._reap()
        cause, error = self.ended or self._death(returncode, job)
        return JobResult(cause, error=error, output=self.output_tail, seconds=time.monotonic() - started,
                         worker=self.pid)

    def kill(self, cause: Cause, error: str) -> None:
        """End the current job: record why (first reason wins), kill the tree, stop waiting for a reply.

        Not waiting for the pipe to close matters: a process forked at the moment of the
        kill can be orphaned still holding it, until ``_reap`` kills the rest of the group.
        """
        if self.ended is None:
            self.ended = (cause, error)
        if self.process.returncode is None:
            procfs.kill_tree(self.process.pid, spare=self.chain[:-1])
        self._waiting.cancel()

    async def close(self) -> None:
        """Let an idle worker exit (it stops at the end of its stdin), else kill it; reap; clean up."""
        with anyio.CancelScope(shield=True):
            if self.process.returncode is None and self.ended is None:
                try:
                    await self.process.stdin.aclose()
                except _STREAM_ENDS:
                    pass
                with anyio.move_on_after(CLOSE_GRACE):
                    await self.process.wait()
            if self.process.returncode is None:
                self.kill("cancelled", "closed")
            await self._reap()
            await self.process.aclose()
            await anyio.to_thread.run_sync(_remove_tree, self.root)
            self.live.discard(self)

    async def _reap(self) -> int:
        """Wait for the launcher to exit (killing it if it will not), then for stray forks in its group."""
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(REAP_GRACE):
                await self.process.wait()
            if self.process.returncode is None:
                procfs.kill_tree(self.process.pid)
            returncode = await self.process.wait()
        procfs.kill_group(self.process.pid)  # forks orphaned before the kill are still in the group
        # bwrap's inner process is its PID namespace's init, in a session of its own and armed to
        # die with its parent only once set up: killed while starting, it outlives the outer one,
        # left to the system's init (blocking SIGCHLD, deaf to every signal from outside but
        # SIGKILL). Its command line names this worker's own scratch root.
        procfs.kill_orphans(f"{self.root}\0")
        return returncode

    async def _exchange(self, job: Job) -> bytes | None:
        data = job.to_json().encode()
        try:
            await self.process.stdin.send(_HEADER.pack(len(data)) + data)
        except _STREAM_ENDS:
            return None
        return await self._receive()

    async def _receive(self) -> bytes | None:
        try:
            header = await self.stream.receive_exactly(_HEADER.size)
            return await self.stream.receive_exactly(_HEADER.unpack(header)[0])
        except _STREAM_ENDS:
            return None

    async def _watch(self, job: Job, cpu_before: float) -> None:
        """Poll the running job's process tree; kill it when it breaks a limit."""
        forked: list[int] = []
        tick = 0
        while True:
            await anyio.sleep(POLL)
            if tick % SCAN_EVERY == 0:
                forked = [pid for pid in procfs.descendants(self.process.pid) if pid not in self.chain]
                self.forked = self.forked or bool(forked)
                if len(forked) > MAX_FORKED:
                    self.kill("crash", f"job started {len(forked)} processes (a fork bomb); worker killed")
                    return
            tick += 1
            rss = procfs.rss_mb([*self.chain, *forked])
            if rss > job.memory_mb:
                self.kill("memory", f"worker used {rss:.0f} MB, over the job's limit of {job.memory_mb} MB")
                return
            cpu = procfs.cpu_seconds(self.pid) - cpu_before
            if cpu > job.cpu_seconds + CPU_GRACE:
                self.kill("cpu", f"job used {cpu:.1f} s of CPU, over its CPU limit of {job.cpu_seconds:g} s")
                return

    def _death(self, returncode: int, job: Job) -> tuple[Cause, str]:
        """Why a worker died on its own. bwrap reports a child's fatal signal N as status 128+N."""
        number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
        try:
            sig = signal.Signals(number)
        except ValueError:
            return "crash", f"worker exited with status {returncode}"
        if sig == signal.SIGXCPU:
            return "cpu", f"job exceeded its CPU limit of {job.cpu_seconds:g} s (SIGXCPU)"
        return "crash", f"worker died: {sig.name}"

    @property
    def output_tail(self) -> str:
        return _tail(self.root / OUTPUT_FILE, OUTPUT_TAIL)

    @property
    def log_tail(self) -> str:
        return _tail(self.root / "worker.log", 2000).strip() or "(no output)"


def _tail(path: Path, size: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
