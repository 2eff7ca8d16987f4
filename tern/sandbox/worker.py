"""A long-lived worker: import TensorFlow (or JAX) once, then run many jobs.

``python -m tern.sandbox.worker --kind tf|jax|jax_tfdata --scratch-root DIR
[--keras keras3|tf_keras] [--jax-cache DIR]``

``import tensorflow`` costs seconds and hundreds of MB while a check's own compute takes
milliseconds, so the expensive part is done once per worker. Translated and LLM-written
code runs here, never in the tern process.

Protocol: frames of a 4-byte big-endian length and UTF-8 JSON. The pool writes ``Job``
frames to our stdin; we answer on our original stdout with one ``{"ready": ...}`` frame
after the imports and one ``JobResult`` frame per job. Both pipes are moved to private
fds at start-up and fds 0/1/2 are pointed elsewhere, so nothing a job or a library prints
can corrupt the protocol; what a job prints is captured to a file and its tail returned.

After each job, before answering, the worker kills every process the job started past the
audit hook: it is a child subreaper, so even a ``setsid`` grandchild whose parent exited
is still its descendant. Files a job makes for later jobs go to ``scratch/output``
(``jobs.OUTPUT``), which the worker moves to ``<root>/output`` for the pool to publish.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import math
import os
import resource
import select
import shutil
import signal
import struct
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tern.sandbox import procfs
from tern.sandbox.confine import end_descendants, reap_children
from tern.sandbox.isolation import Guard
from tern.sandbox.jobs import OUTPUT, Job, JobResult
from tern.sandbox.prng import needs_threefry, prng_for

TASK_PREFIXES = ("tern.",)  # only tern's own task functions; they decide what the untrusted code may do
OUTPUT_TAIL = 8192  # bytes of printed output returned with a result
OUTPUT_FILE = "output.txt"  # under the scratch root; the pool reads it when it ends a job itself
JOB_OUTPUT = "output"  # under the scratch root: the last job's ``OUTPUT`` directory, for the pool
_PR_SET_CHILD_SUBREAPER = 36
BLOCKED_IN_JAX = ("tensorflow", "keras", "tf_keras")
# jax_tfdata: a translation that keeps tf.data input pipelines (rules/allowed/) needs
# TensorFlow, never Keras. TF 2.21's `import tensorflow` tries `keras.src.optimizers`
# eagerly and tolerates an ImportError; `tf.keras` then raises ImportError.
BLOCKED_IN_JAX_TFDATA = ("keras", "tf_keras")
#: what jobs of a kind import on first use, slowly, loaded while the worker has no job to
#: run: verify's distribution tests (``scipy.stats``: 0.4 s) were otherwise paid by the first
#: initial-weights job each JAX worker ran
IDLE_IMPORTS = {"jax": ("scipy.stats",), "jax_tfdata": ("scipy.stats",)}
_JOB_SIGNALS = (signal.SIGXCPU, signal.SIGALRM, signal.SIGINT, signal.SIGTERM)
_HEADER = struct.Struct(">I")


def write_frame(fd: int, value: dict) -> None:
    data = json.dumps(value).encode()
    data = _HEADER.pack(len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def read_frame(fd: int) -> bytes | None:
    """The next frame's JSON text, or None when the pool closed the pipe."""
    header = _read_exactly(fd, _HEADER.size)
    return None if header is None else _read_exactly(fd, _HEADER.unpack(header)[0])


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _claim_protocol_fds() -> tuple[int, int]:
    """Keep the pipes for ourselves; fd 0 reads /dev/null, fd 1 goes where stderr goes."""
    proto_in, proto_out = os.dup(0), os.dup(1)  # dup'd fds are not inherited across exec
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return proto_in, proto_out


def _import_kind(kind: str, keras: str, jax_cache: str) -> None:
    """Environment first (libraries read it at import), then the heavy imports, once."""
    if kind == "tf":
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        if keras == "tf_keras":
            os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import tensorflow  # noqa: F401
        return
    for name in BLOCKED_IN_JAX_TFDATA if kind == "jax_tfdata" else BLOCKED_IN_JAX:
        sys.modules[name] = None  # type: ignore[assignment]  # `import tensorflow` now raises ImportError
    if kind == "jax_tfdata":
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        os.environ.pop("TF_USE_LEGACY_KERAS", None)
        import tensorflow  # noqa: F401  # for tf.data; before JAX, as a translated module imports them
    os.environ.update({
        "JAX_PLATFORMS": "cpu",
        "JAX_DEFAULT_PRNG_IMPL": "rbg",  # threefry compiles for seconds per new shape on CPU
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    })
    if jax_cache:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = jax_cache
    import flax.linen  # noqa: F401
    import jax  # noqa: F401
    import jax.numpy  # noqa: F401
    import numpy  # noqa: F401
    import optax  # noqa: F401

    from tern.sandbox import lowerings, param_checks
    from tern.sandbox.prng import compile_key_derivations

    lowerings.install()  # an edited module's unchanged functions reuse their executables
    param_checks.install()  # Flax's shape check of a parameter, traced once per initializer
    compile_key_derivations()


def _import_pytest_plugins(root: Path) -> None:
    """Import pytest and what its installed plugins load, once, from their compiled bytecode.

    Why: a job's first pytest run would import them under pytest's assertion rewriter, which
    parses and rewrites every module of a plugin's package (hypothesis: 75 of them) in every
    new worker, as workers write no bytecode: a first pytest run took 2.3-2.5 s, against
    0.8 s here and 0.3 s then. Modules loaded now are never purged (``Worker.startup_packages``)."""
    import pytest

    empty = root / "pytest-warm-up"
    empty.mkdir(exist_ok=True)
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        try:
            pytest.main(["--assert=plain", "-q", "-p", "no:cacheprovider", "-c", os.devnull, "--rootdir", str(empty),
                         str(empty)])
        except (Exception, SystemExit):
            pass  # a broken plugin: the job's own pytest run reports it, where the user sees it
    empty.rmdir()


def _freeze_startup_objects() -> None:
    """What the worker imported lives as long as it does (TF or JAX: millions of objects). Frozen,
    it is never walked again by the cyclic collector, whose full collections during a job
    otherwise walked all of it; a job's own objects are collected as before."""
    gc.collect()
    gc.freeze()


#: after these jobs, the next idle moment freezes what is alive again (``freeze_while_idle``)
REFREEZE_AFTER = frozenset({1, 3, 10, 30, 100})


def freeze_while_idle(fd: int) -> bool:
    """Collect, then freeze what survives, unless a job waits on ``fd``; whether it did.

    Why: a worker's first jobs import the library modules they need and fill JAX's and the
    worker's caches, about 100,000 objects that live as long as the worker; unfrozen, each of
    the cyclic collector's full collections walked them all, 25-40 ms that fell inside
    whichever job crossed the threshold (a quarter of a warm check after a one-line edit).
    Frozen after jobs 1 and 3, a full collection walks about a thousand. The price: an
    object frozen here and dropped later, in a reference cycle, is not reclaimed until the
    pool retires the worker (after 200 jobs); hence a few freezes, early and then rarer."""
    if select.select([fd], [], [], 0)[0]:
        return False
    gc.collect()
    gc.freeze()
    return True


def import_while_idle(fd: int, names: list[str]) -> list[str]:
    """Import ``names`` one by one while no job waits on ``fd``; the names still to import.
    A job that arrives meanwhile waits for one import at most; an import that fails is the
    job's to report, if a job needs it."""
    while names and not select.select([fd], [], [], 0)[0]:
        name = names.pop(0)
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    return names


def _restore_signals(handlers: dict[int, Any]) -> None:
    """A job's alarm or SIGXCPU handler must not outlive it and hit the next job."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def _become_subreaper() -> None:
    """Orphans of a job's processes come to us, not to init: we can still find and kill them."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _no_core_dumps() -> None:
    """A segfaulting job must not leave a core file the size of TensorFlow in its scratch."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0 (also stops core pipes)
    except (OSError, AttributeError):
        pass


class Worker:
    """Runs jobs one at a time, each in a fresh scratch directory, and cleans up after it."""

    def __init__(self, kind: str, root: Path, guard: Guard, tmp: Path, pid_namespace: bool = False):
        self.kind, self.root, self.guard, self.tmp = kind, root, guard, tmp
        # PID 2 under an init of our own (bwrap's, confine.py's): every other process in the
        # namespace is the job's, and one kill(-1) ends them all. Never assumed: kill(-1)
        # outside a namespace would signal everything this user may signal.
        self.pid_namespace = pid_namespace and os.getpid() == 2 and os.getppid() == 1
        self.jobs = 0
        # Packages loaded at start-up are never purged, nor their submodules imported later:
        # a second copy of a TensorFlow or JAX internal module breaks the first.
        self.startup_packages = frozenset(name.partition(".")[0] for name in sys.modules)
        self._resolved: dict[str, str] = {}  # a module file's real path, asked after every job
        self._kept: set[str] = set()  # modules of startup packages, known never to be purged

    def run(self, job: Job) -> JobResult:
        started = time.monotonic()
        self.jobs += 1
        module, _, name = job.task.partition(":")
        if not module.startswith(TASK_PREFIXES) or not name:
            return JobResult("error", error=f"task {job.task!r} is not allowed (only {TASK_PREFIXES} tasks run)")
        scratch = self.root / f"job-{self.jobs}"
        with self.guard.trusted():
            scratch.mkdir()
        self._limit_cpu(job.cpu_seconds)
        saved_path, saved_streams = list(sys.path), (sys.stdout, sys.stderr)
        if job.sys_path:
            importlib.invalidate_caches()  # files written since the last job are found
        with self.guard.trusted():
            threefry = self.kind != "tf" and needs_threefry(job.sys_path)
        self.guard.enter([scratch, *job.writable])
        handlers = {sig: signal.getsignal(sig) for sig in _JOB_SIGNALS}
        out_fd = self._redirect_output()
        try:
            os.chdir(scratch)
            sys.path[:0] = list(job.sys_path)
            fn = getattr(importlib.import_module(module), name)
            with prng_for(threefry) if self.kind != "tf" else contextlib.nullcontext():
                value = fn(dict(job.payload), scratch)
            json.dumps(value)  # a value the pool cannot decode would look like a crash
            if not isinstance(value, dict):
                raise TypeError(f"task returned {type(value).__name__}, expected dict")
            result = JobResult("ok", value=value)
        except BaseException:  # noqa: BLE001 - SystemExit and KeyboardInterrupt are job outcomes too
            result = JobResult("error", error=traceback.format_exc())
        finally:
            self.guard.leave()
            _restore_signals(handlers)
            sys.stdout, sys.stderr = saved_streams
            self._restore_output(out_fd)
            sys.path[:] = saved_path
            self._purge(job.sys_path)
            os.chdir(self.root)
            self._limit_cpu(60.0)  # headroom for our own clean-up, whatever the job used
        output = self._cleanup(scratch)
        return JobResult(result.cause, result.value, result.error, output, time.monotonic() - started, os.getpid())

    @staticmethod
    def _limit_cpu(seconds: float) -> None:
        """SIGXCPU ends the job once it has used ``seconds`` more CPU than the worker so far."""
        _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = math.ceil(time.process_time() + seconds)
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))

    def _redirect_output(self) -> tuple[int, int]:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        saved = (os.dup(1), os.dup(2))
        with self.guard.trusted():
            fd = os.open(self.root / OUTPUT_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        return saved

    @staticmethod
    def _restore_output(saved: tuple[int, int]) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        for target, fd in zip((1, 2), saved):
            os.dup2(fd, target)
            os.close(fd)

    def _purge(self, sys_path: tuple[str, ...]) -> None:
        """Forget modules loaded from the job's paths, so an edited translation is re-imported.

        A module counts as loaded from there when its file lies under a path (as given or
        resolved: verification imports packages through symlinks), or when its top-level
        name is a package or module directly in one of the paths (the next job may put
        another package of the same name there)."""
        if not sys_path:
            return
        roots = tuple({os.path.abspath(p) + os.sep for p in sys_path} | {os.path.realpath(p) + os.sep for p in sys_path})
        names: set[str] = set()
        for path in sys_path:
            try:
                names.update(entry.name.removesuffix(".py") for entry in os.scandir(path))
            except OSError:
                continue
        for name in sys.modules.keys() - self._kept:  # in C: most of a worker's modules are kept
            module = sys.modules.get(name)  # a module's attribute may import or drop others meanwhile
            top = name.partition(".")[0]
            if top in self.startup_packages:
                self._kept.add(name)
                continue
            if module is None:
                continue
            file = getattr(module, "__file__", None)
            paths = [file] if file else list(getattr(module, "__path__", None) or ())
            paths = [p for p in paths if isinstance(p, str)]
            if top in names or any(p.startswith(roots) or self._realpath(p).startswith(roots) for p in paths):
                del sys.modules[name]
        importlib.invalidate_caches()  # directory listings cached by mtime could hide a new file

    def _realpath(self, path: str) -> str:
        """``os.path.realpath``, once per path: a module file stays where it was loaded from,
        and resolving every loaded module's path after each job cost 15 ms a job."""
        found = self._resolved.get(path)
        if found is None:
            found = self._resolved[path] = os.path.realpath(path)
        return found

    def _end_strays(self) -> None:
        """Kill and reap every process the job left running (it got past the audit hook)."""
        if self.pid_namespace:
            try:
                os.kill(-1, signal.SIGKILL)  # all of the namespace but its init and us, atomically
            except ProcessLookupError:
                pass  # nothing else runs
            deadline = time.monotonic() + 5.0
            while procfs.live_descendants(int(os.readlink("/proc/self"))) and time.monotonic() < deadline:
                reap_children()
                time.sleep(0.005)
            reap_children()
        else:
            end_descendants(int(os.readlink("/proc/self")))  # this /proc's view of us; os.getpid() may differ

    def _cleanup(self, scratch: Path) -> str:
        """End the job's processes, hand over its output, remove its scratch and TMPDIR
        contents; return the tail of what it printed."""
        with self.guard.trusted():
            self._end_strays()
            with open(self.root / OUTPUT_FILE, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - OUTPUT_TAIL))
                output = f.read().decode("utf-8", "replace")
            handed, produced = self.root / JOB_OUTPUT, scratch / OUTPUT
            remove_path(handed)  # a job may have put something there itself
            if os.path.lexists(produced):  # whatever it is: the pool checks it before publishing
                os.rename(produced, handed)
            shutil.rmtree(scratch, ignore_errors=True)
            for entry in os.scandir(self.tmp):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
        return output


def remove_path(path: Path) -> None:
    """Remove a file, link or directory tree at ``path``, if any."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tern.sandbox.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("tf", "jax", "jax_tfdata"), required=True)
    parser.add_argument("--scratch-root", type=Path, required=True)
    parser.add_argument("--keras", choices=("keras3", "tf_keras"), default="keras3")
    parser.add_argument("--jax-cache", default="")
    parser.add_argument("--pid-namespace", action="store_true", help="the launcher gave us a PID namespace")
    args = parser.parse_args(argv)
    proto_in, proto_out = _claim_protocol_fds()
    sys.dont_write_bytecode = True
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    root = args.scratch_root.resolve()
    tmp = root / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = str(tmp)
    os.environ["TERN_WORKER_KIND"] = args.kind
    import tempfile

    tempfile.tempdir = None  # re-read TMPDIR
    _no_core_dumps()
    _become_subreaper()
    _import_kind(args.kind, args.keras, args.jax_cache)
    _import_pytest_plugins(root)
    # No bytecode cache for job code: a .pyc is trusted by source mtime (whole seconds) and
    # size, so a translation edited twice within a second could run stale code.
    importlib.import_module("tern.sandbox.tasks")
    _freeze_startup_objects()
    os.chdir(root)
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != str(root)]  # `-m` put our cwd there
    guard = Guard([tmp, *([args.jax_cache] if args.jax_cache else [])])
    worker = Worker(args.kind, root, guard, tmp, args.pid_namespace)
    guard.install()  # last: the worker's own set-up is trusted
    write_frame(proto_out, {"ready": True, "pid": os.getpid(), "kind": args.kind})
    idle = list(IDLE_IMPORTS.get(args.kind, ()))
    refreeze = False
    while True:
        idle = import_while_idle(proto_in, idle)
        if refreeze and not idle:
            refreeze = not freeze_while_idle(proto_in)
        if (frame := read_frame(proto_in)) is None:
            break
        write_frame(proto_out, asdict(worker.run(Job.from_json(frame.decode()))))
        refreeze = refreeze or worker.jobs in REFREEZE_AFTER
    return 0


if __name__ == "__main__":
    sys.exit(main())
