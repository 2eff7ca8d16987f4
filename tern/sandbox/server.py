"""The tern daemon: one warm Sandbox per user and project, behind a Unix socket.

Why: without it every CLI run starts its workers cold (TensorFlow and JAX imports cost
seconds). The server only forwards jobs to the Sandbox's worker processes: it never
imports or runs task code, and requests are JSON data (see ``daemon.decode``).

Protocol: one request per connection, one JSON line each way. Ops: ``hello`` (version
key), ``status``, ``stop`` (``drain``: finish in-flight jobs but free the address at
once, so a newer server can start beside it) and ``run`` (a Job; answers a JobResult).
A client that closes its connection mid-job cancels the job.

One op runs tern's own code here rather than only forwarding jobs: ``verify``, the thin
client's ``tern verify`` (``tern/verify/served.py``), which answers with ``{"stderr"}``
progress lines, then ``{"done": {"stdout", "stderr", "exit"}}`` or ``{"fallback": why}``.
It is served only to a client of this same tern, unchanged since the server started.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Awaitable, Callable

import anyio

from tern.sandbox import daemon
from tern.sandbox.daemon import LINE_LIMIT, PROTOCOL, DaemonPaths, decode, encode, paths_for, peer, server_pid, try_lock, version_key
from tern.sandbox.pool import KINDS
from tern.sandbox.jobs import Job, JobResult

REQUEST_TIMEOUT = 30.0  # a client sends its request as soon as it connects
STOP_GRACE = 10.0  # how long cancelled jobs get to report before their connections are cut

_JOB_TYPES: dict[str, type | tuple[type, ...]] = {
    "kind": str, "task": str, "payload": dict, "sys_path": list, "writable": list,
    "timeout": (int, float), "cpu_seconds": (int, float), "memory_mb": int, "output": str,
}


def job_from_data(data: Any) -> Job:
    """A Job from request data, checked field by field (ValueError when it is not one)."""
    if not isinstance(data, dict):
        raise ValueError("job must be an object")
    names = {f.name for f in fields(Job)}
    if unknown := set(data) - names:
        raise ValueError(f"unknown job fields: {sorted(unknown)}")
    for name, value in data.items():
        if not isinstance(value, _JOB_TYPES[name]) or isinstance(value, bool):
            raise ValueError(f"job field {name!r} has the wrong type")
        if name in ("sys_path", "writable") and not all(isinstance(v, str) for v in value):
            raise ValueError(f"job field {name!r} must be a list of strings")
    if data.get("kind") not in KINDS or not isinstance(data.get("task"), str):
        raise ValueError(f"job needs a kind ({', '.join(KINDS)}) and a task")
    return Job.from_json(json.dumps(data))


#: ``answer(request, sandbox, emit)``: a thin client's command (``verify``, ``migrate``) answered in this
#: server with its sandbox: ``{"stdout", "stderr", "exit"}`` or ``{"fallback": why}``
Answer = Callable[[dict[str, Any], Any, Callable[[str], None]], Awaitable[dict[str, Any] | None]]


class Address:
    """The socket path and pid lock this server holds; released once, by inode, so a
    server that stops never removes its successor's socket."""

    def __init__(self, paths: DaemonPaths, lock: int) -> None:
        self.paths, self.lock, self.inode = paths, lock, 0

    def bound(self) -> None:
        os.chmod(self.paths.socket, 0o600)
        self.inode = os.stat(self.paths.socket).st_ino

    def unlink_socket(self) -> None:
        try:
            if self.inode and os.stat(self.paths.socket).st_ino == self.inode:
                os.unlink(self.paths.socket)
        except FileNotFoundError:
            pass
        self.inode = 0

    def release(self) -> None:
        self.unlink_socket()
        if self.lock is not None:
            os.ftruncate(self.lock, 0)
            os.close(self.lock)
            self.lock = None


class Server:
    def __init__(self, sandbox: Any, address: Address, key: str, idle: float, writable_roots: tuple[Path, ...],
                 answers: dict[str, Answer] | None = None) -> None:
        self.answers = dict(answers or {})
        self.sandbox, self.address, self.key, self.idle = sandbox, address, key, idle
        self.writable_roots = [str(p) for p in writable_roots]
        self.started = time.time()
        self.served = 0
        self._last = time.monotonic()
        self._jobs: dict[asyncio.Task, anyio.CancelScope] = {}
        self._handlers: set[asyncio.Task] = set()
        self._stopping = asyncio.Event()
        self._drain = False

    def stop(self, drain: bool = False) -> None:
        if not self._stopping.is_set():
            self._drain = drain
            self._stopping.set()

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(), "project": str(self.address.paths.project),
            "socket": str(self.address.paths.socket), "version": self.key,
            "uptime": round(time.time() - self.started, 3), "idle_timeout": self.idle,
            "jobs_served": self.served, "in_flight": len(self._jobs), "writable_roots": self.writable_roots,
            "sandbox": self.sandbox.status(),
        }

    async def run(self) -> None:
        """Serve until stopped (request, signal or idle), then wind down per the stop mode."""
        listener = await asyncio.start_unix_server(self._handle, path=str(self.address.paths.socket), limit=LINE_LIMIT)
        self.address.bound()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        _log(f"serving {self.address.paths.project} on {self.address.paths.socket} (pid {os.getpid()}, {self.key})")
        watch = asyncio.create_task(self._watch_idle())
        await self._stopping.wait()
        watch.cancel()
        listener.close()
        if self._drain:  # free the address now; a successor may start while jobs finish
            self.address.release()
        else:
            self.address.unlink_socket()
            for scope in self._jobs.values():
                scope.cancel()
        _log(f"stopping ({'drain' if self._drain else 'cancel'}), {len(self._jobs)} jobs in flight")
        if self._handlers:
            _, late = await asyncio.wait(set(self._handlers), timeout=None if self._drain else STOP_GRACE)
            for task in late:
                task.cancel()

    async def _watch_idle(self) -> None:
        step = min(1.0, max(self.idle / 4, 0.02))
        while True:
            await asyncio.sleep(step)
            if not self._jobs and time.monotonic() - self._last >= self.idle:
                _log(f"idle for {self.idle:g}s")
                self.stop()
                return

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        credentials = peer(writer.get_extra_info("socket"))
        if credentials is not None and (credentials[1] != os.getuid() or _descends_from_me(credentials[0])):
            writer.close()  # another user (the 0700 directory should stop them), or job code
            return
        self._handlers.add(asyncio.current_task())
        try:
            try:
                line = await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT)
                if not line:
                    return
                reply = await self._answer(decode(line), reader, writer)
            except (ValueError, asyncio.TimeoutError) as exc:  # bad JSON, too long, silent
                reply = {"error": f"bad request: {exc!r}"}
            except Exception as exc:  # a bug here must not take the server down
                _log(f"error answering a request: {exc!r}")
                reply = {"error": f"server error: {exc!r}"}
            if reply is not None:
                writer.write(encode(reply))
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            self._handlers.discard(asyncio.current_task())
            writer.close()

    async def _answer(self, request: dict[str, Any], reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> dict[str, Any] | None:
        op = request.get("op")
        if op == "hello":
            self._last = time.monotonic()
            return {"version": self.key, "pid": os.getpid(), "protocol": PROTOCOL, "writable_roots": self.writable_roots}
        if op == "status":
            return {"status": self.status()}
        if op == "stop":
            self.stop(drain=bool(request.get("drain")))
            return {"stopping": os.getpid()}
        if op == "run":
            try:
                job = job_from_data(request.get("job"))
            except (ValueError, TypeError) as exc:
                return {"error": f"not a job: {exc}"}
            result = await self._run(job, reader)
            return None if result is None else {"result": asdict(result)}
        if op in ("verify", "migrate"):
            return await self._command(op, request, reader, writer)
        return {"error": f"unknown op {op!r}"}

    def _foreign(self, client: Any) -> str:
        """Why this server must not run a client's command with its own code, or ""."""
        if client != daemon.identity():
            return "the client runs another tern or Python"
        if daemon.version_key() != self.key:  # the module's: a test may patch this one's name
            return "tern's sources changed since this server started"
        return ""

    async def _command(self, op: str, request: dict[str, Any], reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter) -> dict[str, Any] | None:
        if self._stopping.is_set():
            return {"fallback": "tern server is stopping"}
        if why := self._foreign(request.get("tern")):
            return {"fallback": why}
        answer = self.answers.get(op)
        if answer is None:
            return {"fallback": f"this tern server does not answer {op}"}

        def emit(text: str) -> None:
            if text:
                writer.write(encode({"stderr": text}))

        reply = await self._until_hangup(lambda: answer(request, _OwnSandbox(self), emit), reader, op)
        return None if reply is None else reply if "fallback" in reply else {"done": reply}

    async def _run(self, job: Job, reader: asyncio.StreamReader) -> JobResult | None:
        """The job's result; None when the client hung up (the job is then cancelled)."""
        if self._stopping.is_set():
            return JobResult(cause="cancelled", error="tern server is stopping")
        try:
            result = await self._until_hangup(lambda: self.sandbox.run(job), reader, job.task)
        except Exception as exc:
            return JobResult(cause="crash", error=f"tern server: the sandbox failed: {exc!r}")
        if result is None:
            return None
        if result is _STOPPED:
            return JobResult(cause="cancelled", error="tern server stopped before the job finished")
        self.served += 1
        return result

    async def _until_hangup(self, work: Any, reader: asyncio.StreamReader, what: str) -> Any:
        """``await work()``, counted in flight; None when the client hung up first (the work
        is then cancelled), ``_STOPPED`` when the server stopped it.

        Cancelling goes through an anyio scope, as the Sandbox is anyio code: a scope stays
        cancelled until it exits, where a single ``Task.cancel`` can be absorbed by a
        shielded clean-up in the Sandbox and lost.
        """
        scope = anyio.CancelScope()

        async def guarded() -> Any:
            with scope:
                return await work()
            return _STOPPED

        task = asyncio.create_task(guarded())
        self._jobs[task] = scope
        hangup = asyncio.create_task(reader.read(1))  # a client sends nothing more, so any return is EOF
        try:
            await asyncio.wait({task, hangup}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                _log(f"client hung up; cancelling {what}")
                scope.cancel()
                await asyncio.gather(task, return_exceptions=True)
                return None
            return task.result()
        finally:
            hangup.cancel()
            scope.cancel()
            del self._jobs[task]
            self._last = time.monotonic()


_STOPPED = object()


class _OwnSandbox:
    """A Runner over the server's own Sandbox, for the commands it serves itself."""

    warm_daemon = True

    def __init__(self, server: Server) -> None:
        self.server = server

    async def run(self, job: Job) -> JobResult:
        result = await self.server.sandbox.run(job)
        self.server.served += 1
        return result

    async def status(self) -> dict[str, Any]:
        return self.server.status()


def _descends_from_me(pid: int) -> bool:
    """Whether ``pid`` runs under this server (a worker or what a job started): job code
    sees the socket directory (read-only is no bar to connect) and must not drive its server."""
    me = os.getpid()
    for _ in range(64):
        if pid == me:
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])  # the parent
        except (OSError, ValueError, IndexError):
            return False
        if pid <= 1:
            return False
    return False


def _log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} tern serve: {message}", file=sys.stderr, flush=True)


async def _take_lock(paths: DaemonPaths) -> int | None:
    """The pid lock, retried briefly: clients probe it (``server_pid``) for microseconds."""
    for _ in range(50):
        if (lock := try_lock(paths.pidfile)) is not None or server_pid(paths) not in (None, -1):
            return lock
        await asyncio.sleep(0.02)
    return None


async def serve(paths: DaemonPaths, *, idle: float, workers: int | None = None, writable_roots: tuple[Path, ...] = (),
                answers: dict[str, Answer] | None = None) -> int:
    """Serve ``paths.project`` in this process until stopped; the exit code (1: one runs already).
    ``answers`` answer the thin client's commands by name (``tern/verify/served.py``,
    ``tern/migrate_command.py``; the command that starts the server passes them in: the
    sandbox knows neither verification nor translation)."""
    from tern.sandbox.pool import Sandbox

    lock = await _take_lock(paths)
    if lock is None:
        _log(f"a server already runs for {paths.project} (pid {server_pid(paths)})")
        return 1
    address = Address(paths, lock)
    try:
        os.write(lock, json.dumps({"pid": os.getpid(), "socket": str(paths.socket), "project": str(paths.project)}).encode())
        paths.socket.unlink(missing_ok=True)  # we hold the lock, so this socket is stale
        paths.state.mkdir(parents=True, exist_ok=True)
        roots = tuple(Path(p).resolve() for p in writable_roots)
        async with Sandbox(paths.state, workers=workers, writable_roots=roots) as sandbox:
            if warning := sandbox.status()["isolation_warning"]:
                _log(f"warning: {warning}")
            await Server(sandbox, address, version_key(), idle, roots, answers).run()
        _log("stopped")
        return 0
    finally:
        address.release()


def main(project: Path, *, idle: float, workers: int | None = None, writable_roots: tuple[Path, ...] = (),
         answers: dict[str, Answer] | None = None) -> int:
    return asyncio.run(serve(paths_for(project), idle=idle, workers=workers, writable_roots=writable_roots,
                             answers=answers))
