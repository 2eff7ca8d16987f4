"""The sandbox: warm workers, every fault contained with a clear cause, at each isolation level.

One Sandbox per isolation level is shared by the module (JAX workers start in ~2 s; most
tests only send jobs). Each fault runs next to a normal job, which must get its answer,
and is followed by another normal job, which must too. Faults that get past the audit
hook (raw ``ctypes`` calls) show where the levels differ: the tests assert the weaker
behaviour of the weaker levels rather than skipping them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal

import tern
from tern.sandbox import LEVELS, Job, JobResult, Sandbox, available, detect

AVAILABLE = available()
UNAVAILABLE = [level for level in LEVELS if level not in AVAILABLE]
NORMAL = "result = 6 * 7"


def code(snippet: str, **limits) -> Job:
    return Job("jax", "tern.sandbox.tasks:run_code", {"code": snippet}, **limits)


class Driver:
    """Calls into a Sandbox living in a portal's event loop, from synchronous tests."""

    def __init__(self, portal: BlockingPortal, sandbox: Sandbox, writable: Path):
        self.portal, self.sandbox, self.writable = portal, sandbox, writable

    @property
    def level(self) -> str:
        return self.sandbox.level

    def run(self, job: Job) -> JobResult:
        return self.portal.call(self.sandbox.run, job)

    def together(self, *jobs: Job) -> list[JobResult]:
        async def gather() -> list[JobResult]:
            results: list[JobResult | None] = [None] * len(jobs)

            async def one(i: int) -> None:
                results[i] = await self.sandbox.run(jobs[i])

            async with anyio.create_task_group() as tg:
                for i in range(len(jobs)):
                    tg.start_soon(one, i)
            return results  # type: ignore[return-value]

        return self.portal.call(gather)

    def workers(self) -> dict[int, str]:
        return {w["pid"]: w["scratch"] for w in self.sandbox.status()["kinds"]["jax"]["workers"]}


@pytest.fixture(scope="module", params=AVAILABLE)
def sandbox(request, tmp_path_factory) -> Iterator[Driver]:
    state = tmp_path_factory.mktemp(f"sandbox-{request.param}")
    writable = state / "shared"
    with start_blocking_portal() as portal:
        box = Sandbox(state / ".tern", workers=2, isolation=request.param, writable_roots=(writable,))
        with portal.wrap_async_context_manager(box):
            portal.call(box.warm, "jax")
            yield Driver(portal, box, writable)


def assert_serves(driver: Driver) -> None:
    result = driver.run(code(NORMAL))
    assert (result.cause, result.value) == ("ok", {"result": "42"}), result


def with_neighbour(driver: Driver, fault: Job) -> JobResult:
    """Run ``fault`` beside a normal job; the neighbour and a later job must be unaffected."""
    bad, good = driver.together(fault, code(NORMAL))
    assert (good.cause, good.value) == ("ok", {"result": "42"}), good
    assert_serves(driver)
    return bad


def test_levels_reported():
    assert AVAILABLE, "even 'none' should work"
    print(f"isolation levels available: {AVAILABLE}; unavailable: {UNAVAILABLE}")


def test_jax_workers_compile_into_the_shared_cache_when_one_is_set(sandbox, monkeypatch):
    shared = Path(os.environ["TERN_JAX_CACHE"])  # set for the whole suite by conftest.py
    before = set(shared.iterdir())
    snippet = ("import jax, jax.numpy as jnp; dir = jax.config.jax_compilation_cache_dir; "
               f"jax.jit(lambda x: jnp.sin(x) * {time.time_ns() % 10**6}.5)(jnp.ones(3)).block_until_ready(); result = dir")
    result = sandbox.run(code(snippet))
    assert result.ok and result.value == {"result": repr(str(shared))}, result.error
    assert set(shared.iterdir()) - before  # the new computation was written there
    assert not (sandbox.sandbox.state_dir / "jax-cache").exists()
    monkeypatch.delenv("TERN_JAX_CACHE")
    assert sandbox.sandbox.jax_cache == sandbox.sandbox.state_dir / "jax-cache"  # the default: the project's own


def test_a_worker_freezes_what_lives_only_while_no_job_waits():
    import gc

    from tern.sandbox.worker import freeze_while_idle

    read, write = os.pipe()
    try:
        alive = [[i] for i in range(1000)]  # tracked containers, alive across the freeze
        os.write(write, b"x")  # a job's frame is waiting: it goes first
        frozen = gc.get_freeze_count()
        assert not freeze_while_idle(read) and gc.get_freeze_count() == frozen
        os.read(read, 1)
        assert freeze_while_idle(read) and gc.get_freeze_count() >= frozen + len(alive)
    finally:
        gc.unfreeze()  # this test process's collector as it was
        os.close(read)
        os.close(write)


def test_a_worker_imports_slow_modules_while_idle_and_a_waiting_job_goes_first():
    from tern.sandbox.worker import import_while_idle

    read, write = os.pipe()
    try:
        sys.modules.pop("tabnanny", None)
        assert import_while_idle(read, ["tabnanny"]) == [] and "tabnanny" in sys.modules
        sys.modules.pop("tabnanny")
        os.write(write, b"x")  # a job's frame is waiting
        assert import_while_idle(read, ["tabnanny"]) == ["tabnanny"] and "tabnanny" not in sys.modules
        os.read(read, 1)
        assert import_while_idle(read, ["no_such_module_here", "tabnanny"]) == [] and "tabnanny" in sys.modules
    finally:
        os.close(read)
        os.close(write)


def test_echo_and_status(sandbox):
    result = sandbox.run(Job("jax", "tern.sandbox.tasks:echo", {"x": [1, 2]}))
    assert result.ok and result.value["x"] == [1, 2] and result.value["kind"] == "jax"
    assert result.worker in sandbox.workers()
    status = sandbox.sandbox.status()
    assert status["isolation"] == sandbox.level
    assert len(status["kinds"]["jax"]["workers"]) == 2 and "tf" not in status["kinds"]


def test_jax_worker_has_jax_not_tensorflow(sandbox):
    assert sandbox.run(code("import jax; result = jax.default_backend()")).value == {"result": "'cpu'"}
    blocked = sandbox.run(code("import tensorflow"))
    assert blocked.cause == "error" and "ModuleNotFoundError" in blocked.error


@pytest.mark.parametrize("snippet, cause, message", [
    ("import ctypes; ctypes.string_at(0)", "crash", "SIGSEGV"),
    ("import time; print('started', flush=True); time.sleep(600)", "timeout", "wall-time limit"),
    ("while True: pass", "cpu", "CPU limit"),
    ("import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True: pass", "cpu", "CPU limit"),
    ("import ctypes, time\nlibc = ctypes.CDLL(None)\nfor _ in range(6): libc.fork()\ntime.sleep(600)",
     "crash", "fork bomb"),
], ids=["segfault", "timeout", "cpu", "cpu-ignoring-sigxcpu", "ctypes-fork-bomb"])
def test_fault_ends_job_and_worker(sandbox, snippet, cause, message):
    before = sandbox.workers()
    result = with_neighbour(sandbox, code(snippet, timeout=2 if cause == "timeout" else 120, cpu_seconds=1))
    assert result.cause == cause and message in result.error, result
    if cause == "timeout":
        assert "started" in result.output  # what the job printed before it was killed
    assert_no_survivors(before.get(result.worker))


def test_memory_hog(sandbox):
    before = sandbox.workers()
    baseline = max(rss_mb(pid) for pid in before)
    hog = code("b = bytearray()\nwhile True: b += bytes(20_000_000)", memory_mb=int(baseline) + 300)
    result = with_neighbour(sandbox, hog)
    assert result.cause == "memory" and "MB" in result.error, result
    assert_no_survivors(before.get(result.worker))


def test_processes_left_behind_retire_the_worker(sandbox):
    """A job that forks past the hook and returns: its answer stands, its worker and child go."""
    before = sandbox.workers()
    snippet = "import ctypes, time\nif ctypes.CDLL(None).fork() == 0:\n    time.sleep(600)\ntime.sleep(1)\nresult = 1"
    result = with_neighbour(sandbox, code(snippet))
    assert result.value == {"result": "1"}, result
    assert_no_survivors(before.get(result.worker))


@pytest.mark.parametrize("snippet, denied", [
    ("import socket; socket.create_connection(('1.1.1.1', 53), timeout=1)", "network socket"),
    ("import socket; s = socket.socket(socket.AF_UNIX); s.bind('x.sock')", "socket.bind"),
    ("open('/etc/tern-sandbox-test', 'w')", "writing '/etc/tern-sandbox-test'"),
    (f"open({str(Path(tern.__file__).parents[1] / 'tern-sandbox-test')!r}, 'a')", "writing"),
    ("import os; os.remove({victim!r})", "os.remove"),
    ("import os; os.rename({victim!r}, 'stolen')", "os.rename"),
    ("import os\nwhile True: os.fork()", "os.fork"),
    ("import subprocess; subprocess.run(['true'])", "subprocess.Popen"),
    ("import multiprocessing as mp; mp.get_context('spawn').Process(target=print).start()", "starting a process"),
], ids=["connect-internet", "bind", "write-etc", "write-repo", "remove", "rename", "fork-bomb", "subprocess",
        "multiprocessing"])
def test_guard_denies(sandbox, snippet, denied, tmp_path):
    victim = tmp_path / "victim.txt"  # outside every directory the job may write
    victim.write_text("keep")
    result = with_neighbour(sandbox, code(snippet.format(victim=str(victim))))
    assert result.cause == "error" and "tern sandbox:" in result.error and denied in result.error, result
    assert not Path("/etc/tern-sandbox-test").exists()
    assert not (Path(tern.__file__).parents[1] / "tern-sandbox-test").exists()
    assert victim.read_text() == "keep"


def test_raw_write_outside_reaches_only_without_bwrap(sandbox, tmp_path):
    """``ctypes`` bypasses the audit hook; only bwrap's read-only filesystem stops it."""
    target = tmp_path / "escaped.txt"
    snippet = ("import ctypes, os\n"
               f"result = ctypes.CDLL(None).open({str(target).encode()!r}, os.O_WRONLY | os.O_CREAT, 0o644)")
    result = with_neighbour(sandbox, code(snippet))
    assert result.ok, result
    contained = sandbox.level == "bwrap"
    assert (int(result.value["result"]) < 0) == contained and target.exists() != contained


def test_raw_connect_reaches_host_loopback_only_at_level_none(sandbox):
    """Past the hook, a network namespace (bwrap, unshare) still hides the host's loopback."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        snippet = (
            "import ctypes, socket, struct\nlibc = ctypes.CDLL(None)\nfd = libc.socket(2, 1, 0)\n"
            f"addr = struct.pack('=H', 2) + struct.pack('!H', {port}) + socket.inet_aton('127.0.0.1') + bytes(8)\n"
            "result = libc.connect(fd, addr, len(addr))"
        )
        result = with_neighbour(sandbox, code(snippet))
    assert result.ok, result
    assert (result.value["result"] == "0") == (sandbox.level == "none")


def test_print_does_not_corrupt_protocol(sandbox):
    snippet = ("import os, sys\nfor i in range(20000): print('line', i)\n"
               "os.write(1, b'raw fd 1\\n'); os.write(2, b'raw fd 2\\n')\n"
               "print('END', file=sys.stderr)\nresult = 'done'")
    result = sandbox.run(code(snippet))
    assert result.value == {"result": "'done'"}
    assert result.output.endswith("raw fd 1\nraw fd 2\nEND\n") and len(result.output) <= 8192
    assert_serves(sandbox)


def test_edited_module_is_reimported(sandbox, tmp_path):
    package = tmp_path / "translated"
    package.mkdir()
    snippet = "import sys\nbefore = 'mymod' in sys.modules\nimport mymod\nresult = (before, mymod.VALUE)"
    pids = []
    for value in (1, 2, 3):
        (package / "mymod.py").write_text(f"VALUE = {value}\n")
        result = sandbox.run(code(snippet, sys_path=(str(package),)))
        assert result.value == {"result": repr((False, value))}, result
        pids.append(result.worker)
    assert len(set(pids)) < len(pids)  # some worker ran two of them, so it did re-import


def test_writable_dirs(sandbox):
    inside = sandbox.writable / "job-output"
    inside.mkdir(exist_ok=True)
    result = sandbox.run(code(f"open({str(inside / 'a.txt')!r}, 'w').write('hi')", writable=(str(inside),)))
    assert result.ok, result
    assert (inside / "a.txt").read_text() == "hi"
    outside = sandbox.run(code("pass", writable=("/etc",)))
    assert outside.cause == "error" and "not under the sandbox's writable roots" in outside.error


def test_scratch_is_fresh_and_removed(sandbox):
    snippet = ("import os, tempfile\nresult = (os.getcwd(), os.listdir('.'), os.listdir(tempfile.gettempdir()))\n"
               "open('a.txt', 'w').write('x')\ntempfile.mkdtemp()")
    first, second = sandbox.run(code(snippet)), sandbox.run(code(snippet))
    for result in (first, second):
        cwd, listing, temporary = eval(result.value["result"])
        assert listing == ["snippet.py"] and temporary == [] and not Path(cwd).exists()


def test_pytest_runs_under_the_guard(sandbox):
    """...and only the test file goes through pytest's assertion rewriter: the plugins' modules
    (hypothesis, anyio, ...) were imported from bytecode when the worker started."""
    snippet = ("open('test_x.py', 'w').write('def test_a(tmp_path):\\n    (tmp_path / \"f\").write_text(\"x\")\\n')\n"
               "import pytest, sys\nfrom _pytest.assertion.rewrite import AssertionRewritingHook\n"
               "code = int(pytest.main(['-q', '-p', 'no:cacheprovider', 'test_x.py']))\n"
               "result = code, sorted(n for n, m in list(sys.modules.items())\n"
               "                      if isinstance(getattr(m, '__loader__', None), AssertionRewritingHook))")
    result = sandbox.run(code(snippet))
    assert result.value == {"result": "(0, ['test_x'])"}, result
    assert "1 passed" in result.output


def test_task_outside_tern_refused(sandbox):
    result = sandbox.run(Job("jax", "os:getcwd"))
    assert result.cause == "error" and "not allowed" in result.error


def test_cancellation_kills_the_worker(sandbox):
    async def scenario() -> tuple[int, bool]:
        box = sandbox.sandbox
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(box.run, code("import time; time.sleep(600)"))
                while not [w for w in box.status()["kinds"]["jax"]["workers"] if w["busy"]]:
                    await anyio.sleep(0.01)
                pid = next(w["pid"] for w in box.status()["kinds"]["jax"]["workers"] if w["busy"])
                scope.cancel()
        return pid, scope.cancelled_caught

    restarts = sandbox.sandbox.status()["kinds"]["jax"]["restarts"]
    pid, cancelled = sandbox.portal.call(scenario)
    assert cancelled and gone(pid)
    assert sandbox.sandbox.status()["kinds"]["jax"]["restarts"] == restarts + 1
    assert_serves(sandbox)


def test_tf_worker_imports_tensorflow(tmp_path):
    async def scenario() -> JobResult:
        async with Sandbox(tmp_path, workers=1) as box:
            snippet = ("import sys, tensorflow as tf\n"
                       "@tf.function\ndef double_positive(x):\n    if tf.reduce_sum(x) > 0:\n        return 2 * x\n"
                       "    return x\n"  # AutoGraph converts the `if`: it needs the snippet's source
                       "result = ('tensorflow' in sys.modules, float(tf.reduce_sum(double_positive(tf.ones(3)))))")
            result = await box.run(Job("tf", "tern.sandbox.tasks:run_code", {"code": snippet}))
            assert "jax" not in box.status()["kinds"]  # a TF-only run never starts JAX workers
            return result

    assert anyio.run(scenario).value == {"result": "(True, 6.0)"}


def test_jax_tfdata_worker_has_tf_data_and_jax_but_never_keras(tmp_path):
    """The worker for translations that keep tf.data input pipelines: TensorFlow imports
    (TF 2.21's eager `keras.src.optimizers` import fails quietly), tf.data runs and feeds a
    jitted function; `tf.keras`, `import keras` and `import tf_keras` all fail."""
    snippet = (
        "import sys, jax, jax.numpy as jnp, tensorflow as tf\n"
        "ds = tf.data.Dataset.from_tensor_slices(([1., 2., 3.], [0, 1, 0])).shuffle(3, seed=0).batch(2)\n"
        "ds = ds.map(lambda x, y: (tf.cast(x, tf.float32) * 2, y)).prefetch(tf.data.AUTOTUNE)\n"
        "total = float(sum(jax.jit(jnp.sum)(x) for x, _ in ds.as_numpy_iterator()))\n"
        "refused = []\n"
        "for attempt in ('tf.keras.layers', 'import keras', 'import tf_keras'):\n"
        "    try:\n"
        "        exec(attempt)\n"
        "    except ImportError:\n"
        "        refused.append(attempt)\n"
        "loaded = sorted({m.split('.')[0] for m, v in sys.modules.items() if v is not None} & {'keras', 'tf_keras'})\n"
        "result = (total, refused, loaded)"
    )

    async def scenario() -> tuple[JobResult, dict]:
        async with Sandbox(tmp_path, workers=1) as box:
            result = await box.run(Job("jax_tfdata", "tern.sandbox.tasks:run_code", {"code": snippet}))
            echo = await box.run(Job("jax_tfdata", "tern.sandbox.tasks:echo", {}))
            assert set(box.status()["kinds"]) == {"jax_tfdata"}  # neither a TF nor a plain JAX worker started
            return result, echo.value

    result, echo = anyio.run(scenario)
    assert result.value == {"result": "(12.0, ['tf.keras.layers', 'import keras', 'import tf_keras'], [])"}, result.error
    assert echo["kind"] == "jax_tfdata"


def test_recycle_and_close(tmp_path):
    async def scenario() -> tuple[list[int], JobResult, list[int]]:
        async with anyio.create_task_group() as tg:
            async with Sandbox(tmp_path, workers=1, recycle_after=2) as box:
                pids = [(await box.run(code(NORMAL))).worker for _ in range(3)]
                late: list[JobResult] = []

                async def hang() -> None:
                    late.append(await box.run(code("import time; time.sleep(600)")))

                tg.start_soon(hang)
                while not box.status()["kinds"]["jax"]["busy"]:
                    await anyio.sleep(0.01)
                live = [w["pid"] for w in box.status()["kinds"]["jax"]["workers"]]
        return pids, late[0], live

    pids, late, live = anyio.run(scenario)
    assert pids[0] == pids[1] != pids[2]
    assert late.cause == "cancelled" and "closed" in late.error
    assert live and all(gone(pid) for pid in [*pids, *live])


OWNER = """
import sys, anyio
from tern.sandbox import Job, Sandbox

async def main():
    async with Sandbox(sys.argv[1], workers=1, isolation=sys.argv[2]) as box:
        async with anyio.create_task_group() as tg:
            tg.start_soon(box.run, Job("jax", "tern.sandbox.tasks:run_code", {"code": "import time; time.sleep(600)"}))
            while not box.status().get("kinds", {}).get("jax", {}).get("busy"):
                await anyio.sleep(0.01)
            print(box.status()["kinds"]["jax"]["workers"][0]["scratch"], flush=True)
            await anyio.sleep(600)

anyio.run(main)
"""


@pytest.mark.parametrize("level", AVAILABLE)
def test_busy_workers_die_with_a_killed_owner(level, tmp_path):
    """No ``async with`` exit runs when tern is SIGKILLed; the launchers' parent-death signals must do."""
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path / "state"), level], stdout=subprocess.PIPE,
                             text=True)
    scratch = owner.stdout.readline().strip()
    owner.kill()
    owner.wait()
    assert_no_survivors(scratch)


def test_orphans_of_a_killed_owner_are_swept_at_start(tmp_path):
    scratch = tmp_path / "state" / "scratch"
    orphan = f"{sys.executable} -c 'import time; time.sleep(600)' {scratch}/jax-x"
    subprocess.run(["sh", "-c", f"{orphan} >/dev/null 2>&1 &"], check=True)  # sh exits: init adopts it
    assert eventually(lambda: survivors(f"{scratch}/jax-x"))
    if read(survivors(f"{scratch}/jax-x")[0] / "stat").rsplit(b")", 1)[1].split()[1] != b"1":
        pytest.skip("a subreaper, not init, adopted the orphan; kill_orphans only sweeps init's")

    async def scenario() -> None:
        async with Sandbox(tmp_path / "state"):
            pass

    anyio.run(scenario)
    assert eventually(lambda: not survivors(f"{scratch}/jax-x"))


def test_failed_start_is_a_result(tmp_path):
    async def scenario() -> JobResult:
        async with Sandbox(tmp_path, keras="no-such-keras") as box:
            return await box.run(code(NORMAL))

    result = anyio.run(scenario)
    assert result.cause == "crash" and "worker failed to start" in result.error and "invalid choice" in result.error


def test_env_chooses_level_for_auto(monkeypatch):
    monkeypatch.setenv("TERN_SANDBOX", "none")
    assert detect("auto") == "none"
    assert detect(AVAILABLE[0]) == AVAILABLE[0]  # an explicit request wins over the environment
    monkeypatch.setenv("TERN_SANDBOX", "chroot")
    with pytest.raises(ValueError, match="unknown isolation level"):
        detect("auto")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def eventually(condition, patience: float = 30.0) -> bool:
    """SIGKILLed processes take a moment to disappear; wait for it rather than time it."""
    deadline = time.monotonic() + patience
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def gone(pid: int) -> bool:
    def dead() -> bool:
        stat = read(Path(f"/proc/{pid}/stat"))
        return not stat or stat.rsplit(b")", 1)[1].split()[0] == b"Z"

    return eventually(dead)


def survivors(scratch: str) -> list[Path]:
    """Live processes whose command line ends an argument with ``scratch`` (zombies have none)."""
    marker = scratch.encode() + b"\0"
    return [p for p in Path("/proc").iterdir() if p.name.isdigit() and marker in read(p / "cmdline")]


def assert_no_survivors(scratch: str | None) -> None:
    """No process still carries the killed worker's command line (forked copies included)."""
    assert scratch, "the faulty job ran on a worker that was not warm"
    assert eventually(lambda: not survivors(scratch)), survivors(scratch)


def read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
