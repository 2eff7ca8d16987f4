"""Run sandbox jobs through the project's warm daemon, starting one on demand.

Why a daemon: a CLI run would otherwise start its workers cold. Why fallbacks: the daemon
is only a speed-up; an in-process Sandbox (its workers are separate processes too) gives
the same results, so "auto" falls back to it with a one-line note on stderr.

A job whose server dies under it ends as ``JobResult(cause="crash")``: the client watches
both the connection and the server's pid, so it neither hangs nor loses a result silently.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, AsyncIterator, Protocol

from tern.sandbox.daemon import (LINE_LIMIT, DaemonPaths, decode, encode, find_project, paths_for, peer, resolve_mode,
                                 server_pid, try_lock, version_key)
from tern.sandbox.jobs import Job, JobResult

START_TIMEOUT = 60.0  # a cold server imports tern and starts its Sandbox
ANSWER_TIMEOUT = 10.0  # hello, status and stop: a live server answers at once
STOP_TIMEOUT = 30.0  # stopping kills the workers
LIVENESS_STEP = 0.5  # while a job runs, how often the server's pid is checked
_POLL = 0.02
_LOG_MAX = 1 << 20
_spawned: list[subprocess.Popen] = []  # kept so a server that exits is reaped, not left a zombie


class DaemonUnavailable(RuntimeError):
    """No daemon could be reached or started; the message says why."""


class Runner(Protocol):
    warm_daemon: bool

    async def run(self, job: Job) -> JobResult: ...

    async def status(self) -> dict[str, Any]: ...


async def request(paths: DaemonPaths, message: dict[str, Any], *, timeout: float = ANSWER_TIMEOUT) -> dict[str, Any] | None:
    """One request on its own connection; None when no server listens (no socket, or a stale one)."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(paths.socket), limit=LINE_LIMIT), timeout)
    except (FileNotFoundError, ConnectionRefusedError):
        return None
    except asyncio.TimeoutError:
        raise DaemonUnavailable(f"the server at {paths.socket} accepts no connections") from None
    try:
        writer.write(encode(message))
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout)
        return decode(line) if line.endswith(b"\n") else None
    except asyncio.TimeoutError:
        raise DaemonUnavailable(f"the server at {paths.socket} does not answer") from None
    except (ConnectionError, ValueError):
        return None
    finally:
        writer.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a dead child of ours is a zombie until reaped
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return not os.path.isdir("/proc/self")


def _spawn(paths: DaemonPaths, workers: int | None, writable_roots: tuple[Path, ...]) -> subprocess.Popen:
    """``python -m tern serve`` detached (own session), logging to .tern/server.log."""
    paths.state.mkdir(parents=True, exist_ok=True)
    if paths.log.exists() and paths.log.stat().st_size > _LOG_MAX:
        paths.log.unlink()
    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[2])  # the directory holding this tern
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    command = [sys.executable, "-P", "-m", "tern", "serve", "--project", str(paths.project)]
    if workers:
        command += ["--workers", str(workers)]
    for root in writable_roots:
        command += ["--writable", str(root)]
    _spawned[:] = [p for p in _spawned if p.poll() is None]
    with open(paths.log, "ab") as log:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                cwd=paths.state, env=env, start_new_session=True)
    _spawned.append(proc)
    return proc


@asynccontextmanager
async def _start_lock(paths: DaemonPaths, deadline: float) -> AsyncIterator[None]:
    loop = asyncio.get_running_loop()
    while (fd := try_lock(paths.startlock)) is None:
        if loop.time() > deadline:
            raise DaemonUnavailable("another client is starting the server and has not finished")
        await asyncio.sleep(_POLL)
    try:
        yield
    finally:
        os.close(fd)


def _covers(roots: list[str], wanted: tuple[Path, ...]) -> bool:
    have = [Path(root) for root in roots]
    return all(any(path == root or root in path.parents for root in have) for path in wanted)


async def ensure_daemon(paths: DaemonPaths, *, workers: int | None = None, writable_roots: tuple[Path, ...] = (),
                        timeout: float = START_TIMEOUT) -> dict[str, Any]:
    """The hello of a server that runs this tern and lets jobs write under ``writable_roots``.

    Starts one if none runs. One that does not fit (another tern, or roots it was not
    started with: bubblewrap binds them at worker start) is asked to drain, finishing its
    jobs, and a new one starts with its roots and ours.
    """
    wanted = tuple(Path(p).resolve() for p in writable_roots)

    def fits(info: dict[str, Any] | None) -> bool:  # the key is read again: tern may be edited meanwhile
        return info is not None and info.get("version") == version_key() and _covers(info.get("writable_roots", []), wanted)

    if fits(info := await request(paths, {"op": "hello"})):
        return info
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with _start_lock(paths, deadline):
        started: subprocess.Popen | None = None
        while loop.time() < deadline:
            if fits(info := await request(paths, {"op": "hello"})):
                return info
            if info is not None:
                if started is not None:
                    raise DaemonUnavailable(f"the server started reports {info}, not version {version_key()} with {wanted}")
                kept = tuple(Path(p) for p in info.get("writable_roots", []))
                wanted = tuple(dict.fromkeys(kept + wanted))
                await request(paths, {"op": "stop", "drain": True})
            elif server_pid(paths) is None:  # nobody serves: the socket, if any, is stale
                if started is None:
                    started = _spawn(paths, workers, wanted)
                elif started.poll() is not None:
                    raise DaemonUnavailable(f"the server exited with status {started.returncode}; see {paths.log}")
            await asyncio.sleep(_POLL)
    raise DaemonUnavailable(f"no server answered within {timeout:g}s; see {paths.log}")


async def daemon_status(paths: DaemonPaths) -> dict[str, Any] | None:
    """The server's status, or None; a stale socket found on the way is removed."""
    reply = await request(paths, {"op": "status"})
    if reply is None:
        _remove_stale_socket(paths)
        return None
    return reply.get("status")


async def stop_daemon(paths: DaemonPaths, *, timeout: float = STOP_TIMEOUT) -> int | None:
    """Stop the project's server and wait until it has exited (workers killed, socket
    removed); its pid, or None when none ran."""
    try:
        reply = await request(paths, {"op": "stop"})
    except DaemonUnavailable:
        reply = None
    pid = reply.get("stopping") if reply else server_pid(paths)
    if reply is None and pid and pid > 0:  # it holds the lock but does not answer
        os.kill(pid, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while server_pid(paths) is not None:
        if loop.time() > deadline:
            raise DaemonUnavailable(f"the server (pid {pid}) did not stop within {timeout:g}s")
        await asyncio.sleep(_POLL)
    _remove_stale_socket(paths)
    return pid if pid and pid > 0 else None


def _remove_stale_socket(paths: DaemonPaths) -> None:
    fd = try_lock(paths.pidfile) if paths.socket.exists() else None
    if fd is not None:  # holding the lock: no server can be using the socket
        try:
            paths.socket.unlink(missing_ok=True)
        finally:
            os.close(fd)


class DaemonRunner:
    """Jobs through the daemon, one connection each (closing it cancels the job)."""

    warm_daemon = True

    def __init__(self, paths: DaemonPaths, hello: dict[str, Any], *, restart: bool, workers: int | None,
                 writable_roots: tuple[Path, ...]) -> None:
        self.paths, self.hello, self._restart = paths, hello, restart
        self._workers, self._roots = workers, writable_roots
        self._restarting = asyncio.Lock()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection, restarting the server once if it went away since (idle, stopped)."""
        for attempt in (0, 1):
            try:
                return await asyncio.open_unix_connection(str(self.paths.socket), limit=LINE_LIMIT)
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                if attempt or not self._restart:
                    raise DaemonUnavailable(f"no server at {self.paths.socket} ({exc.strerror})") from None
                async with self._restarting:
                    self.hello = await ensure_daemon(self.paths, workers=self._workers, writable_roots=self._roots)
        raise AssertionError("unreachable")

    async def run(self, job: Job) -> JobResult:
        try:
            reader, writer = await self._connect()
        except DaemonUnavailable as exc:
            return JobResult(cause="crash", error=f"tern server unavailable: {exc}")
        credentials = peer(writer.get_extra_info("socket"))  # whichever server accepted, if restarted
        pid = credentials[0] if credentials else self.hello.get("pid", 0)
        try:
            writer.write(encode({"op": "run", "job": asdict(job)}))
            await writer.drain()
            reply = decode(await self._answer(reader, pid))
        except (ConnectionError, ValueError) as exc:
            return JobResult(cause="crash", error=f"tern server connection lost while running {job.task} (server pid {pid}): {exc}")
        finally:
            writer.close()
        if isinstance(reply.get("result"), dict):
            return JobResult(**reply["result"])
        return JobResult(cause="error", error=f"tern server refused the job: {reply.get('error')}")

    @staticmethod
    async def _answer(reader: asyncio.StreamReader, pid: int) -> bytes:
        """The reply line, watching the server's pid meanwhile: a dead server may leave the
        connection open (a descendant holding the socket), and that must not hang us."""
        line = asyncio.ensure_future(reader.readline())
        try:
            while True:
                done, _ = await asyncio.wait({line}, timeout=LIVENESS_STEP)
                if done:
                    if not line.result().endswith(b"\n"):
                        raise ConnectionError("the server closed the connection")
                    return line.result()
                if pid and not _alive(pid):
                    raise ConnectionError(f"the server (pid {pid}) died")
        finally:
            line.cancel()

    async def status(self) -> dict[str, Any]:
        reply = await request(self.paths, {"op": "status"})
        if reply is None:
            raise DaemonUnavailable(f"no server at {self.paths.socket}")
        return reply["status"]


class LocalRunner:
    """Jobs through a Sandbox owned by this process (its workers are still separate processes)."""

    warm_daemon = False

    def __init__(self, sandbox: Any) -> None:
        self.sandbox = sandbox

    async def run(self, job: Job) -> JobResult:
        return await self.sandbox.run(job)

    async def status(self) -> dict[str, Any]:
        return self.sandbox.status()


@asynccontextmanager
async def open_runner(project: Path, *, daemon: str = "auto", workers: int | None = None,
                      writable_roots: tuple[Path, ...] = ()) -> AsyncIterator[Runner]:
    """A Runner for ``project``: its daemon when one can be had (``daemon``: auto, never,
    require), else an in-process Sandbox. ``workers`` applies to a server started here (a
    running server keeps its own); ``writable_roots`` as for ``Sandbox``."""
    mode = resolve_mode(daemon)
    if mode != "never":
        try:
            paths = paths_for(project)
            hello = await ensure_daemon(paths, workers=workers, writable_roots=writable_roots)
        except (DaemonUnavailable, OSError) as exc:
            if mode == "require":
                raise DaemonUnavailable(str(exc)) from exc
            sys.stderr.write(f"tern: no daemon ({exc}); running jobs in this process\n")
        else:
            yield DaemonRunner(paths, hello, restart=True, workers=workers, writable_roots=writable_roots)
            return
    from tern.sandbox.pool import Sandbox

    async with Sandbox(find_project(project) / ".tern", workers=workers, writable_roots=writable_roots) as sandbox:
        yield LocalRunner(sandbox)


def describe(status: dict[str, Any]) -> str:
    """``tern serve --status``: the server's facts, then its Sandbox's."""
    sandbox = status.get("sandbox", {})
    running = [f"{name} {kind['idle']} idle, {kind['busy']} busy, {kind['starting']} starting"
               for name, kind in sandbox.get("kinds", {}).items()]
    lines = [
        f"pid: {status['pid']}", f"uptime: {status['uptime']:.1f}s", f"project: {status['project']}",
        f"version: {status['version']}", f"isolation: {sandbox.get('isolation', '?')}",
        f"workers: {sandbox.get('workers_per_kind', '?')} per kind" + "".join(f"; {r}" for r in running),
        f"jobs served: {status['jobs_served']} ({status['in_flight']} in flight)",
        f"idle timeout: {status['idle_timeout']:g}s",
        f"writable roots: {', '.join(status.get('writable_roots', [])) or 'none'}",
    ]
    if sandbox.get("isolation_warning"):
        lines.append(f"warning: {sandbox['isolation_warning']}")
    return "\n".join(lines) + "\n"
