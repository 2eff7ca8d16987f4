"""Job code never reaches tern's state: hostile jobs, run the way verification runs them.

A translated test is untrusted code. These jobs try what a hostile but fair user tried:
rewrite the verification cache (``sqlite3``, SQL ``ATTACH``, libsqlite3 and libc through
``ctypes``), write outside the scratch directory, leave a ``setsid`` grandchild running,
and rename, remove or create files elsewhere. Each runs through the real pool (one also
through the daemon) at the ``bwrap`` and ``unshare`` levels where this machine has them,
with ``.tern`` passed as a writable root as ``tern eval`` and the agent do: the sandbox
must carve tern's state out of it. Where a level is weaker by design (``unshare`` has no
read-only root), the test asserts the documented warning instead of the boundary.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

from tern.sandbox import Job, JobResult, Sandbox, available, isolation
from tern.sandbox.client import open_runner, stop_daemon
from tern.sandbox.daemon import paths_for, private_dir
from tern.verify.cache import Cache
from test_sandbox import eventually

ROOT = Path(__file__).resolve().parents[1]
AVAILABLE = available()
STRONG = ("bwrap", "unshare")  # the levels the brief holds to "nothing reaches tern's state"
POISON = json.dumps({"status": "failure: poisoned"})
KEPT = {"status": "equivalent", "from": "another package"}


def code(snippet: str, **fields) -> Job:
    return Job("jax", "tern.sandbox.tasks:run_code", {"code": snippet}, **fields)


def need(level: str) -> None:
    if level not in AVAILABLE:
        pytest.skip(f"isolation level {level!r} does not run on this machine (its probe failed)")


def cache_files(state: Path) -> dict[str, bytes]:
    """Every file of the cache (database, WAL, shared memory), by name: the bytes a job must not change."""
    return {p.name: p.read_bytes() for p in sorted(state.glob("cache.sqlite*"))}


def make_project(base: Path) -> tuple[Path, Path]:
    """A project whose cache holds another package's result."""
    base.mkdir(parents=True, exist_ok=True)
    (base / "pyproject.toml").write_text("[project]\nname = 'harm'\n")
    state = base / ".tern"
    cache = Cache(state)
    cache.put("other-package", "tests", KEPT)
    cache.close()
    return base, state


def cached_value(state: Path) -> dict | None:
    cache = Cache(state)
    try:
        return cache.get("other-package", "tests")
    finally:
        cache.close()


@dataclass
class Box:
    portal: BlockingPortal
    sandbox: Sandbox
    project: Path
    state: Path

    @property
    def level(self) -> str:
        return self.sandbox.level

    @property
    def cache(self) -> Path:
        return self.state / "cache.sqlite"

    def run(self, job: Job) -> JobResult:
        return self.portal.call(self.sandbox.run, job)


@pytest.fixture(scope="module", params=STRONG)
def box(request, tmp_path_factory) -> Iterator[Box]:
    need(request.param)
    project, state = make_project(tmp_path_factory.mktemp(f"harm-{request.param}"))
    with start_blocking_portal() as portal:
        sandbox = Sandbox(state, workers=1, isolation=request.param, writable_roots=(state,))
        with portal.wrap_async_context_manager(sandbox):
            yield Box(portal, sandbox, project, state)


@pytest.fixture
def untouched(box) -> Iterator[None]:
    """The cache's bytes, and what it answers for another package, are the same after the test."""
    before = cache_files(box.state)
    yield
    assert cache_files(box.state) == before
    assert cached_value(box.state) == KEPT


# -- (a) the verification cache -----------------------------------------------------------

def test_sqlite3_connect_to_the_cache_is_refused(box, untouched):
    snippet = (f"import sqlite3\ndb = sqlite3.connect({str(box.cache)!r})\n"
               f"db.execute('UPDATE results SET value = ?', ({POISON!r},))\ndb.commit()")
    result = box.run(code(snippet))
    assert result.cause == "error" and "tern sandbox: sqlite3.connect on" in result.error, result


@pytest.mark.parametrize("sql", ["ATTACH {cache!r} AS stolen", "ATTACH ? AS stolen", "VACUUM INTO {outside!r}"],
                         ids=["attach", "attach-parameter", "vacuum-into"])
def test_sqlite_opening_files_from_sql_is_refused(box, untouched, sql, tmp_path):
    """``ATTACH`` and ``VACUUM INTO`` open files from SQL, past the ``sqlite3.connect`` event."""
    outside = tmp_path / "copy.sqlite"
    statement = sql.format(cache=str(box.cache), outside=str(outside))
    parameters = (str(box.cache),) if "?" in sql else ()
    snippet = (f"import sqlite3\ndb = sqlite3.connect(':memory:')\ndb.execute({statement!r}, {parameters!r})\n"
               f"db.execute('UPDATE stolen.results SET value = ?', ({POISON!r},))")
    result = box.run(code(snippet))
    assert result.cause == "error" and ("not authorized" in result.error or "authorization denied" in result.error), result
    assert not outside.exists()


RAW_SQLITE = """
import ctypes
try:
    lib = ctypes.CDLL("libsqlite3.so.0")
except OSError:
    lib = None
if lib is None:
    result = "no libsqlite3"
else:
    db = ctypes.c_void_p()
    opened = lib.sqlite3_open_v2({cache!r}.encode(), ctypes.byref(db), 0x2, None)  # SQLITE_OPEN_READWRITE
    written = lib.sqlite3_exec(db, {sql!r}, None, None, None)
    lib.sqlite3_close(db)
    result = (opened, written)
"""


def raw_sqlite(cache: Path) -> str:
    return RAW_SQLITE.format(cache=str(cache), sql=f"UPDATE results SET value = '{POISON}'".encode())


def test_libsqlite3_past_the_guard_cannot_write_the_cache(box, untouched):
    """The reported attack with the audit hook out of the way: libsqlite3 called through ctypes."""
    result = box.run(code(raw_sqlite(box.cache)))
    assert result.ok, result
    if result.value["result"] == "'no libsqlite3'":
        pytest.skip("libsqlite3.so.0 is not loadable here")
    opened, written = eval(result.value["result"])
    assert (opened, written) != (0, 0), "the UPDATE went through"


# -- (b) writes past the guard -------------------------------------------------------------

RAW_WRITE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.open({path!r}.encode(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
if fd >= 0:
    libc.write(fd, b"escaped", 7)
    libc.close(fd)
result = (fd, ctypes.get_errno())
"""


def raw_write(box: Box, path: Path) -> int:
    result = box.run(code(RAW_WRITE.format(path=str(path))))
    assert result.ok, result
    return eval(result.value["result"])[0]


def test_raw_write_cannot_reach_tern_state(box, untouched):
    """libc's own open and write, at every place tern keeps state: the cache, the recordings (the
    project's and the store projects share, ``TERN_RECORDINGS``, set for the suite by conftest.py),
    another worker's scratch root, the daemon's runtime directory. All read-only mounts."""
    recordings = box.state / "recordings"
    recordings.mkdir(exist_ok=True)
    name = f"escaped-{uuid.uuid4().hex[:8]}"
    through_host = Path(f"/proc/{os.getpid()}/root") / str(box.cache).lstrip("/")  # the host's mount namespace
    targets = [box.cache, through_host, recordings / name, Path(os.environ["TERN_RECORDINGS"]) / name,
               box.state / "scratch" / name, private_dir() / name, box.state / name]
    for target in targets:
        assert raw_write(box, target) < 0, target
    assert not any(t.exists() for t in targets[2:])


def test_raw_write_elsewhere_is_stopped_by_bwrap_or_warned_of(box, tmp_path):
    """Outside tern's state, only bubblewrap's read-only root stops libc; unshare says so."""
    target = tmp_path / "escaped.txt"
    fd = raw_write(box, target)
    warning = box.sandbox.status()["isolation_warning"]
    if box.level == "bwrap":
        assert fd < 0 and not target.exists() and warning == ""
    else:
        assert target.exists()  # the documented weakness, and the documented warning:
        assert warning == isolation.warning(box.level)
        assert "without a read-only filesystem" in warning and "apt-get install bubblewrap" in warning


def test_writable_roots_over_tern_state_keep_only_shared_outputs(box):
    """``.tern`` asked for as a writable root reaches its weights/ staging area, nothing else."""
    shared = box.state / "weights" / uuid.uuid4().hex
    shared.mkdir(parents=True)
    result = box.run(code(f"open({str(shared / 'w.bin')!r}, 'w').write('w')", writable=(str(shared),)))
    assert result.ok and (shared / "w.bin").read_text() == "w", result
    refused = box.run(code("pass", writable=(str(box.state / "recordings"),)))
    assert refused.cause == "error" and "tern's own state is never writable" in refused.error
    assert raw_write(box, shared.parent / "escaped.txt") >= 0  # the mount agrees with the check
    assert raw_write(box, box.state / "links-escaped.txt") < 0


# -- (c) processes: the host's, and those a job leaves behind ----------------------------------

def test_raw_kill_cannot_reach_a_host_process(box):
    """The hook refuses os.kill of other pids; past it, the PID namespace hides the host's."""
    host = subprocess.Popen(["sleep", "300"])
    try:
        result = box.run(code(f"import ctypes\nresult = ctypes.CDLL(None).kill({host.pid}, 9)"))
        assert result.ok and result.value["result"] != "0", result
        time.sleep(0.2)
        assert host.poll() is None
    finally:
        host.kill()
        host.wait()


FORK_SETSID = """
import ctypes, os, time
libc = ctypes.CDLL(None)
if libc.fork() == 0:
    libc.setsid()
    if libc.fork() == 0:
        argv = (ctypes.c_char_p * 3)(b"/bin/sleep", b"{marker}", None)
        libc.execv(b"/bin/sleep", argv)
        libc._exit(127)
    libc._exit(0)
time.sleep(1.0)
{ending}
"""

SPAWN_SETSID = """
import ctypes, os, time
libc = ctypes.CDLL(None)
pid = ctypes.c_int()
argv = (ctypes.c_char_p * 5)(b"setsid", b"-f", b"/bin/sleep", b"{marker}", None)
spawned = libc.posix_spawn(ctypes.byref(pid), {setsid!r}, None, None, argv, None)
assert spawned == 0, spawned
time.sleep(1.0)
{ending}
"""

ENDINGS = {"returns": "result = 'returned'", "kills-its-worker": "os.kill(os.getpid(), 9)"}


def sleepers(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("start", ["ctypes-fork-setsid", "ctypes-posix_spawn-setsid"])
def test_a_setsid_grandchild_does_not_survive_its_job(box, start, ending):
    setsid = shutil.which("setsid")
    if start.endswith("posix_spawn-setsid") and not setsid:
        pytest.skip("no setsid binary")
    marker = f"{300 + int(time.time() * 1000) % 1000}.{uuid.uuid4().int % 10**9}"  # sleep's argument, unique
    template = FORK_SETSID if start == "ctypes-fork-setsid" else SPAWN_SETSID
    snippet = template.format(marker=marker, ending=ENDINGS[ending], setsid=(setsid or "").encode())
    result = box.run(code(snippet, timeout=60))
    if ending == "returns":
        assert result.value == {"result": "'returned'"}, result
    else:
        assert result.cause == "crash", result
    assert eventually(lambda: not sleepers(marker)), f"{sleepers(marker)} still run `sleep {marker}`"
    assert box.run(code("result = 6 * 7")).value == {"result": "42"}


# -- (d) the guard, the second layer ----------------------------------------------------------

@pytest.mark.parametrize("snippet, denied", [
    ("import os; os.rename({victim!r}, 'stolen')", "os.rename"),
    ("import os; os.replace('snippet.py', {victim!r})", "os.rename"),
    ("import os; os.remove({victim!r})", "os.remove"),
    ("import os; os.unlink({victim!r})", "os.remove"),
    ("import os; os.makedirs({folder!r} + '/a/b')", "os.mkdir"),
    ("import os; os.rmdir({empty!r})", "os.rmdir"),
    ("import os; os.chmod({victim!r}, 0o777)", "os.chmod"),
    ("import os; os.truncate({victim!r}, 0)", "os.truncate"),
    ("import os; os.symlink('snippet.py', {folder!r} + '/link')", "os.symlink"),
    ("import os; os.link({victim!r}, 'hard'); open('hard', 'w').write('x')", "os.link"),
    ("import os; os.open({victim!r}, os.O_WRONLY)", "writing"),
    ("import os; os.open('victim.txt', os.O_WRONLY, dir_fd=os.open({folder!r}, os.O_RDONLY))", "os.open"),
    ("import os; os.mkfifo({folder!r} + '/fifo')", "os.mkfifo"),
    ("import shutil; shutil.rmtree({folder!r})", "shutil.rmtree"),
    ("import shutil; shutil.copyfile('snippet.py', {folder!r} + '/copy')", "shutil.copyfile"),
    ("import shutil; shutil.copytree('.', {folder!r} + '/tree')", "shutil.copytree"),
    ("import shutil; shutil.move({victim!r}, 'moved')", "shutil.move"),
    ("import tempfile; tempfile.mkstemp(dir={folder!r})", "tempfile.mkstemp"),
    ("import tempfile; tempfile.mkdtemp(dir={folder!r})", "tempfile.mkdtemp"),
    ("import sqlite3; sqlite3.connect({folder!r} + '/new.sqlite')", "sqlite3.connect"),
], ids=lambda value: value if isinstance(value, str) and " " not in value else None)
def test_guard_refuses_file_calls_outside_the_job(box, snippet, denied, tmp_path):
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "victim.txt").write_text("keep")
    (folder / "empty").mkdir()
    before = sorted(p.name for p in folder.iterdir())
    result = box.run(code(snippet.format(victim=str(folder / "victim.txt"), folder=str(folder),
                                         empty=str(folder / "empty"))))
    assert result.cause == "error" and "PermissionError: tern sandbox:" in result.error and denied in result.error, result
    assert sorted(p.name for p in folder.iterdir()) == before
    assert (folder / "victim.txt").read_text() == "keep"


def test_the_same_calls_inside_the_job_are_allowed(box):
    """Near misses: every call above, on the job's own scratch and TMPDIR."""
    snippet = """
import os, shutil, sqlite3, tempfile
open('victim.txt', 'w').write('mine')
os.rename('victim.txt', 'renamed.txt'); os.replace('renamed.txt', 'victim.txt')
os.makedirs('a/b'); os.rmdir('a/b'); os.chmod('victim.txt', 0o600); os.truncate('victim.txt', 2)
os.symlink('victim.txt', 'link'); os.link('victim.txt', 'hard'); os.remove('hard'); os.unlink('link')
here = os.open('.', os.O_RDONLY); os.close(os.open('at.txt', os.O_WRONLY | os.O_CREAT, dir_fd=here)); os.close(here)
os.mkfifo('fifo'); shutil.copyfile('victim.txt', 'copy.txt'); shutil.copytree('a', 'tree'); shutil.rmtree('tree')
shutil.move('copy.txt', 'moved.txt'); os.close(tempfile.mkstemp()[0]); tempfile.mkdtemp()
db = sqlite3.connect('own.sqlite'); db.execute('CREATE TABLE t (x)'); db.execute("ATTACH 'other.sqlite' AS o")
db.execute("VACUUM INTO 'vacuumed.sqlite'"); db.close(); sqlite3.connect(':memory:').execute("ATTACH '' AS temporary")
result = sorted(os.listdir('.'))
"""
    result = box.run(code(snippet))
    assert result.ok, result.error
    assert "vacuumed.sqlite" in result.value["result"] and "at.txt" in result.value["result"]


# -- (e) what later jobs read: published by the pool, read-only to jobs ------------------------

def test_a_jobs_output_is_published_by_the_pool(box):
    target = box.state / "recordings" / f"key-{uuid.uuid4().hex[:8]}"
    target.parent.mkdir(exist_ok=True)
    made = box.run(code("import os\nos.makedirs('output/sub')\nopen('output/sub/case.json', 'w').write('{}')",
                        output=str(target)))
    assert made.ok and (target / "sub" / "case.json").read_text() == "{}", made
    read = box.run(code(f"result = open({str(target / 'sub' / 'case.json')!r}).read()"))
    assert read.value == {"result": "'{}'"}, read
    assert raw_write(box, target / "sub" / "case.json") < 0  # later jobs read recordings, never write them
    direct = box.run(code(f"open({str(target / 'forged.json')!r}, 'w')"))
    assert direct.cause == "error" and "tern sandbox:" in direct.error


@pytest.mark.parametrize("snippet, problem", [
    ("import os\nos.makedirs('output')\nos.symlink({cache!r}, 'output/case.npz')", "not a plain file"),
    ("import os\nos.makedirs('output')\nos.mkfifo('output/case.npz')", "not a plain file"),
    ("import os\nos.symlink({recordings!r}, 'output')", "not a directory"),
    ("import os\nos.makedirs('output')\nopen('output/case.npz', 'w').close()\nraise SystemExit(3)", None),
], ids=["symlink-inside", "fifo-inside", "output-is-a-link", "job-failed"])
def test_a_jobs_output_is_published_only_when_plain_and_ok(box, snippet, problem, untouched):
    target = box.state / "recordings" / f"key-{uuid.uuid4().hex[:8]}"
    target.parent.mkdir(exist_ok=True)
    result = box.run(code(snippet.format(cache=str(box.cache), recordings=str(target.parent)), output=str(target)))
    assert result.cause == "error" and (problem is None or problem in result.error), result
    assert not os.path.lexists(target)


# -- through the daemon, and through `tern verify` ------------------------------------------------

@pytest.mark.parametrize("level", STRONG)
def test_through_the_daemon_the_cache_and_socket_are_out_of_reach(level, tmp_path, monkeypatch):
    need(level)
    monkeypatch.setenv("TERN_SANDBOX", level)
    project, state = make_project(tmp_path / "project")
    paths = paths_for(project)
    before = cache_files(state)

    async def scenario() -> tuple[list[JobResult], dict]:
        async with open_runner(project, daemon="require", writable_roots=(state,)) as runner:
            jobs = [code(raw_sqlite(state / "cache.sqlite")),
                    code(RAW_WRITE.format(path=str(paths.socket.parent / "forged.sock"))),
                    code(f"import sqlite3; sqlite3.connect({str(state / 'cache.sqlite')!r})")]
            return [await runner.run(job) for job in jobs], await runner.status()

    try:
        (sqlite_past_hook, raw_socket, connect), status = asyncio.run(scenario())
    finally:
        asyncio.run(stop_daemon(paths, timeout=60))
    assert status["sandbox"]["isolation"] == level
    assert sqlite_past_hook.ok and eval(sqlite_past_hook.value["result"]) != (0, 0), sqlite_past_hook
    assert raw_socket.ok and eval(raw_socket.value["result"])[0] < 0 and not (paths.socket.parent / "forged.sock").exists()
    assert connect.cause == "error" and "sqlite3.connect" in connect.error
    assert cache_files(state) == before and cached_value(state) == KEPT


@pytest.mark.parametrize("level", STRONG)
def test_verify_records_through_the_pool_and_reports_the_isolation(level, tmp_path):
    """Recordings still reach .tern/recordings (moved there by the sandbox, not the job), later
    replay jobs read them, and the report says how isolated the run was. The project records
    itself at each level: no store shared with the suite's other projects."""
    need(level)
    fixtures = ROOT / "fixtures"  # the smallest fixture with layer cases: what is checked here is the pool's part
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'isolation'\n")
    shutil.copytree(fixtures / "tf" / "custom_dense", tmp_path / "custom_dense")
    shutil.copytree(fixtures / "expected" / "custom_dense", tmp_path / "out" / "custom_dense",
                    ignore=shutil.ignore_patterns("__pycache__", "*.toml"))
    proc = subprocess.run([sys.executable, "-m", "tern", "verify", "out/custom_dense", "--original", "custom_dense",
                           "--daemon", "never", "--json", "r.json"], capture_output=True, text=True, cwd=tmp_path, check=False,
                          timeout=1200, env={**os.environ, "TERN_SANDBOX": level, "COLUMNS": "200", "TERN_RECORDINGS": ""})
    report = json.loads((tmp_path / "r.json").read_text())
    row = next(r for p in report["packages"] for r in p["rows"] if r["module"] == "custom_dense.layers")
    assert row["status"] == "equivalent" and row["cases_matched"] == row["cases_total"] > 0, proc.stdout + proc.stderr
    recordings = [p for p in (tmp_path / ".tern" / "recordings").iterdir()]
    assert recordings and not any(".partial" in p.name for p in recordings)
    assert any(p.suffix == ".npz" for r in recordings for p in r.iterdir())  # the TF recording's arrays
    assert report["run"]["isolation"] == {"level": level, "warning": isolation.warning(level)}
    if level == "bwrap":
        assert "warning:" not in proc.stdout
    else:
        assert "isolation unshare: tests run without a read-only filesystem; install bubblewrap" in proc.stdout
