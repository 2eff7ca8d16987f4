"""The tern daemon as clients meet it: started by ``tern serve`` or on demand, reused warm,
stopped, idled out, replaced when stale or of another tern, and killed under a job.

Every server runs in its own process against a tmp project and is stopped in fixture
teardown (``stop_daemon``, then SIGKILL for anything left). Jobs are jax-kind (echo, or a
sleeping snippet where a job must be in flight), so no test needs TensorFlow. Timeouts
here only bound a broken run; no test measures time. A test that checks reuse skips if
tern's sources change under it (others may be editing the tree): a new server is then right.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tern.cli import app
from tern.sandbox import client, procfs
from tern.sandbox.client import DaemonUnavailable, open_runner, request, stop_daemon
from tern.sandbox.daemon import resolve_mode
from tern.sandbox.daemon import paths_for, server_pid, version_key
from tern.sandbox.jobs import Job

ROOT = Path(__file__).resolve().parents[1]
ECHO = "tern.sandbox.tasks:echo"
SAFETY = 120.0  # bounds a hung test; never a threshold on speed

CLIENT = """
import asyncio, json, sys
from pathlib import Path
from tern.sandbox.client import open_runner
from tern.sandbox.jobs import Job

async def main():
    async with open_runner(Path(sys.argv[1])) as runner:
        result = await runner.run(Job("jax", "tern.sandbox.tasks:echo", {"i": 7}))
        status = await runner.status()
    print(json.dumps({"warm": runner.warm_daemon, "cause": result.cause, "value": result.value,
                      "worker": result.worker, "pid": status.get("pid"), "version": status.get("version")}))

asyncio.run(main())
"""

OLD_SERVER = """
import sys
import tern.sandbox.server as server
server.version_key = lambda: "0.0.0+an-older-tern"
from tern.cli import app
app(sys.argv[1:], prog_name="tern")
"""


def echo(i: int = 0) -> Job:
    return Job(kind="jax", task=ECHO, payload={"i": i})


SLOW = Job(kind="jax", task="tern.sandbox.tasks:run_code", payload={"code": "import time\ntime.sleep(60)"})


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TERN_DAEMON"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def alive(pid: int) -> bool:
    return client._alive(pid)


def wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + SAFETY
    while not predicate():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.02)


async def until(check, what: str):
    """Poll ``await check()`` until it is truthy; its value."""
    deadline = time.monotonic() + SAFETY
    while not (value := await check()):
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        await asyncio.sleep(0.02)
    return value


async def in_flight(root: Path) -> int:
    return (await request(paths_for(root), {"op": "status"}))["status"]["in_flight"]


def same_server(first: dict, second: dict) -> None:
    """Reuse is checkable only while tern's sources stand still: others may edit the tree
    during a run, and then a new server is the right answer (the version key did its job)."""
    if first["version"] != second["version"]:
        pytest.skip("tern's sources changed during the test, so its server was rightly replaced")
    assert first["pid"] == second["pid"]


async def busy_workers(root: Path) -> list[int]:
    kinds = (await request(paths_for(root), {"op": "status"}))["status"]["sandbox"]["kinds"]
    return [w["pid"] for w in kinds.get("jax", {}).get("workers", []) if w["busy"]]


def hello(root: Path) -> dict | None:
    return asyncio.run(request(paths_for(root), {"op": "hello"}))


def run_jobs(root: Path, *jobs: Job, daemon: str = "auto"):
    async def go():
        async with open_runner(root, daemon=daemon) as runner:
            results = await asyncio.gather(*(runner.run(job) for job in jobs))
            return runner.warm_daemon, results, await runner.status()

    return asyncio.run(go())


_started: list[subprocess.Popen] = []  # waited for (or killed) in teardown


def serve_cli(root: Path, *args: str, script: str | None = None) -> subprocess.Popen:
    """``tern serve`` in the foreground, as a user starts it; returns once it answers."""
    command = [sys.executable, "-c", script, "serve"] if script else [sys.executable, "-m", "tern", "serve"]
    log = open(root / "serve.log", "ab")
    proc = subprocess.Popen([*command, "--project", str(root), *args], cwd=ROOT, env=child_env(),
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    log.close()
    _started.append(proc)
    wait_until(lambda: proc.poll() is not None or hello(root) is not None, "tern serve to answer")
    assert proc.poll() is None, (root / "serve.log").read_text()
    return proc


def kill_everything(root: Path, pids: list[int]) -> None:
    """Teardown: stop the project's server cleanly, then SIGKILL whatever is left."""
    try:
        asyncio.run(stop_daemon(paths_for(root), timeout=30))
    except Exception:
        pid = server_pid(paths_for(root))
        if pid and pid > 0:
            os.kill(pid, signal.SIGKILL)
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    paths = paths_for(root)
    if server_pid(paths) is None:  # lock files outlive servers by design; tmp projects need none
        paths.pidfile.unlink(missing_ok=True)
        paths.startlock.unlink(missing_ok=True)


class Projects:
    """Projects (dirs with a pyproject.toml) whose servers and leftovers die at teardown."""

    def __init__(self, base: Path):
        self.base, self.made, self.pids = base, [], []  # pids: processes to kill if they outlive the test

    def __call__(self, name: str = "proj") -> Path:
        root = self.base / name
        root.mkdir()
        (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
        self.made.append(root)
        return root

    def teardown(self) -> None:
        for root in self.made:
            kill_everything(root, self.pids)
        while _started:
            proc = _started.pop()
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def make_project(tmp_path):
    projects = Projects(tmp_path)
    yield projects
    projects.teardown()


@pytest.fixture
def project(make_project):
    return make_project()


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One warm server for the tests that only use one (it is never stopped by them)."""
    projects = Projects(tmp_path_factory.mktemp("shared"))
    root = projects()
    warm, [result], status = run_jobs(root, echo())
    assert warm and result.ok
    yield root, status, result.worker
    projects.teardown()


# ---------------------------------------------------------------------------- no server


def test_never_runs_in_process_without_a_server(project):
    warm, [result], status = run_jobs(project, echo(3), daemon="never")
    assert warm is False
    assert result.ok and result.value["i"] == 3 and result.value["kind"] == "jax"
    assert result.worker != os.getpid()  # still a separate worker process
    assert not paths_for(project).socket.exists() and server_pid(paths_for(project)) is None


def test_mode_comes_from_the_environment_when_not_given(monkeypatch):
    monkeypatch.setenv("TERN_DAEMON", "never")
    assert resolve_mode("auto") == "never"
    assert resolve_mode("require") == "require"
    monkeypatch.setenv("TERN_DAEMON", "sometimes")
    with pytest.raises(ValueError):
        resolve_mode("auto")


def test_project_is_the_nearest_marked_ancestor(project):
    inner = project / "src" / "pkg"
    inner.mkdir(parents=True)
    assert paths_for(inner) == paths_for(project)
    assert paths_for(project).state == project / ".tern"
    assert len(os.fsencode(paths_for(project).socket)) < 108


def test_auto_falls_back_when_no_server_starts(project, monkeypatch, capfd):
    def broken(paths, workers, roots):
        return subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])

    monkeypatch.setattr(client, "_spawn", broken)
    warm, [result], _ = run_jobs(project, echo(1))
    assert warm is False and result.ok
    assert "no daemon" in capfd.readouterr().err
    with pytest.raises(DaemonUnavailable, match="status 3"):
        run_jobs(project, echo(1), daemon="require")


# ---------------------------------------------------------------------------- one server


def test_cli_serve_status_and_stop(project):
    proc = serve_cli(project, "--idle", "600")
    started = hello(project)
    warm, [first], _ = run_jobs(project, echo(1))
    warm2, [second], status = run_jobs(project, echo(2))  # a second client, same warm worker
    assert warm and warm2 and first.ok and second.ok
    same_server(started, status)
    assert status["pid"] == proc.pid
    assert first.worker == second.worker != proc.pid and first.value["pid"] == second.value["pid"]

    (project / "sub").mkdir()
    shown = CliRunner().invoke(app, ["serve", "--project", str(project / "sub"), "--status"])
    assert shown.exit_code == 0, shown.output
    for fact in (f"pid: {proc.pid}", "jobs served: 2", "uptime:", "isolation:", "workers:"):
        assert fact in shown.output

    stopped = subprocess.run([sys.executable, "-m", "tern", "serve", "--project", str(project), "--stop"],
                             cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=SAFETY)
    assert stopped.returncode == 0 and str(proc.pid) in stopped.stdout
    assert proc.wait(timeout=SAFETY) == 0
    assert not paths_for(project).socket.exists()
    wait_until(lambda: not alive(first.worker), "the worker to be killed")
    again = CliRunner().invoke(app, ["serve", "--project", str(project), "--status"])
    assert again.exit_code == 1 and "no tern server" in again.output
    again = CliRunner().invoke(app, ["serve", "--project", str(project), "--stop"])
    assert again.exit_code == 0 and "no tern server" in again.output


def test_second_serve_refuses_while_one_runs(project):
    proc = serve_cli(project)
    second = subprocess.run([sys.executable, "-m", "tern", "serve", "--project", str(project)],
                            cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=SAFETY)
    assert second.returncode == 1 and "already runs" in second.stderr
    assert hello(project)["pid"] == proc.pid


def test_idles_out(project):
    proc = serve_cli(project, "--idle", "0.3")
    assert proc.wait(timeout=SAFETY) == 0
    assert not paths_for(project).socket.exists() and server_pid(paths_for(project)) is None
    assert "idle for 0.3s" in (project / "serve.log").read_text()


def test_fresh_client_processes_reuse_the_warm_server(shared):
    root, server, worker = shared

    def fresh_client() -> dict:
        done = subprocess.run([sys.executable, "-c", CLIENT, str(root)], cwd=ROOT, env=child_env(),
                              capture_output=True, text=True, timeout=SAFETY)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    first, second = fresh_client(), fresh_client()
    assert first["warm"] and first["cause"] == "ok" and first["value"]["i"] == 7
    same_server(server, first)
    same_server(first, second)
    assert first["worker"] == second["worker"] == worker
    assert (root / ".tern" / "server.log").exists()


def test_requests_are_checked_data(shared):
    root, server, _ = shared

    async def raw(line: bytes) -> dict:
        reader, writer = await asyncio.open_unix_connection(str(paths_for(root).socket))
        writer.write(line)
        await writer.drain()
        reply = json.loads(await reader.readline())
        writer.close()
        return reply

    assert "error" in asyncio.run(raw(b"not json\n"))
    assert "error" in asyncio.run(raw(b"[1, 2]\n"))
    assert "error" in asyncio.run(raw(b'{"op": "run", "job": {"kind": "jax", "task": "x", "payload": []}}\n'))
    assert "error" in asyncio.run(raw(b'{"op": "run", "job": {"kind": "jax", "task": "x", "code": "1"}}\n'))
    assert "error" in asyncio.run(raw(b'{"op": "exec", "code": "print(1)"}\n'))
    same_server(server, hello(root))
    assert hello(root) == {"version": version_key(), "pid": server["pid"], "protocol": 1, "writable_roots": []}


def test_job_code_cannot_drive_its_server(shared):
    """Past the audit hook (raw libc calls), a job reaches the socket but the server hangs up."""
    root, server, _ = shared
    snippet = f"""
import ctypes, struct
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.socket(1, 1, 0)
path = {str(paths_for(root).socket)!r}.encode()
address = struct.pack("H", 1) + path + bytes(108 - len(path))
connected = libc.connect(fd, address, len(address))
libc.write(fd, b'{{"op": "stop"}}\\n', 15)
buffer = ctypes.create_string_buffer(1000)
got = libc.read(fd, buffer, 1000)
result = (connected, buffer.raw[:max(got, 0)])
"""
    _, [result], status = run_jobs(root, Job("jax", "tern.sandbox.tasks:run_code", {"code": snippet}))
    assert result.ok, result.error
    assert result.value["result"] == "(0, b'')"  # connected, then nothing but the hang-up
    same_server(server, status)


def test_concurrent_jobs_and_clients(project):
    async def go():
        async with open_runner(project) as a, open_runner(project) as b:
            results = await asyncio.gather(*(runner.run(echo(i)) for i, runner in enumerate([a, b] * 6)))
            return a.hello, b.hello, results, await a.status()

    hello_a, hello_b, results, status = asyncio.run(go())
    same_server(hello_a, hello_b)  # two clients starting at once start one server (the start lock)
    assert [r.value["i"] for r in results] == list(range(12)) and all(r.ok for r in results)
    assert status["jobs_served"] == 12 and status["in_flight"] == 0


def test_writable_roots_a_server_lacks_bring_a_wider_one(project):
    out, more = project / "out", project / "more"

    def write(directory: Path):
        snippet = f"open({str(directory / 'x.txt')!r}, 'w').write('hi')"
        job = Job("jax", "tern.sandbox.tasks:run_code", {"code": snippet}, writable=(str(directory),))

        async def go():
            async with open_runner(project, writable_roots=(directory,)) as runner:
                return await runner.run(job), await runner.status()

        return asyncio.run(go())

    first, before = write(out)
    assert first.ok, first.error
    assert (out / "x.txt").read_text() == "hi"
    second, after = write(more)
    assert second.ok, second.error
    assert after["pid"] != before["pid"] and set(after["writable_roots"]) == {str(out), str(more)}
    third, last = write(out)
    assert third.ok
    same_server(after, last)  # covered now: no restart


def test_two_projects_get_two_servers(make_project):
    a, b = make_project("a"), make_project("b")
    _, [ra], sa = run_jobs(a, echo())
    _, [rb], sb = run_jobs(b, echo())
    assert sa["pid"] != sb["pid"] and sa["socket"] != sb["socket"]
    assert ra.worker != rb.worker
    assert sa["project"] == str(a.resolve()) and sb["project"] == str(b.resolve())


# ---------------------------------------------------------------------------- replacing a server


def test_stale_socket_is_cleaned_and_replaced(project, make_project):
    _, [result], status = run_jobs(project, echo())
    make_project.pids.append(result.worker)
    os.kill(status["pid"], signal.SIGKILL)
    wait_until(lambda: server_pid(paths_for(project)) is None, "the killed server's lock to go")
    assert paths_for(project).socket.exists()  # what a dead server leaves

    shown = CliRunner().invoke(app, ["serve", "--project", str(project), "--status"])
    assert shown.exit_code == 1 and not paths_for(project).socket.exists()

    os.kill(status["pid"], 0)  # a zombie child of ours until reaped; the next start must not mind
    warm, [again], new = run_jobs(project, echo())
    assert warm and again.ok and new["pid"] != status["pid"]


def test_server_of_another_tern_is_replaced(project):
    old = serve_cli(project, script=OLD_SERVER)
    assert hello(project)["version"] != version_key()
    warm, [result], status = run_jobs(project, echo())
    assert warm and result.ok
    assert status["pid"] != old.pid and status["version"] == version_key()
    assert old.wait(timeout=SAFETY) == 0  # the old one finished and left


def test_killed_server_mid_job_is_a_crash_result(project, make_project):
    async def go():
        async with open_runner(project) as runner:
            job = asyncio.create_task(runner.run(SLOW))
            make_project.pids.extend(await until(lambda: busy_workers(project), "the job to run on a worker"))
            os.kill(runner.hello["pid"], signal.SIGKILL)
            return await asyncio.wait_for(job, SAFETY)

    result = asyncio.run(go())
    assert result.cause == "crash" and "tern server connection lost" in result.error


def test_hang_up_cancels_the_job_and_stop_cancels_the_rest(project):
    paths = paths_for(project)

    async def nothing_in_flight() -> bool:
        return await in_flight(project) == 0

    async def go():
        async with open_runner(project) as runner:
            hung_up = asyncio.create_task(runner.run(SLOW))
            await until(lambda: in_flight(project), "the first job to be in flight")
            hung_up.cancel()  # closes the connection: the server cancels the job
            await until(nothing_in_flight, "the server to cancel it")
            stopped = asyncio.create_task(runner.run(SLOW))
            busy = await until(lambda: busy_workers(project), "the second job to run on a worker")
            assert await stop_daemon(paths) == runner.hello["pid"]
            return await stopped, busy

    result, busy = asyncio.run(go())
    assert result.cause == "cancelled" and "stopped" in result.error
    assert busy and not any(alive(pid) for pid in busy)
    assert not paths.socket.exists()
    # nor a launcher: bwrap's namespace init once outlived its outer bwrap, left to the system's init
    wait_until(lambda: not procfs.mentioning(str(project / ".tern")), "the sandbox's processes to be gone")
