"""Files translated in worker processes that start before the package pre-pass ends.

The pre-pass (``tern/engine/package.py``) reads every module before any file can be
translated, and runs in this process, on one core. The workers start first and spend that
time on what needs no package facts: parsing the largest files with LibCST, one worker at a
time per free core. Once the package is known it goes to each worker once (pickled into an
unnamed file they inherit), and each worker translates the files it parsed before the largest
file nobody parsed. A file that changed after it was parsed is parsed again.

On 400 Keras modules the pre-pass is a tenth of a ``-j 1`` run; with the workers idle during
it, ``-j 2`` could not reach 1.83x (``eval/bench_migrate.py``).
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import gc
import multiprocessing
import os
import pickle
import signal
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from tern.engine import collection

#: source bytes parsed ahead in one run, over all workers: a parsed module holds about 100
#: times its source in memory, so this keeps a run's extra memory near 400 MB
AHEAD_BYTES = 4_000_000
#: larger files are not parsed ahead: the facts may be ready while one is being parsed, and
#: its worker only starts translating when that parse ends (LibCST: 0.1 s for 64 KB, 1.6 s
#: for Keras' 450 KB numpy_test.py)
AHEAD_FILE_BYTES = 64_000
PR_SET_PDEATHSIG = 1  # linux/prctl.h
FREE, RESERVED, CLAIMED = 0, 1, 2  # a job's state: RESERVED by the worker that parses it ahead


@dataclass
class _Shared:
    """What the workers inherit when they fork: the work, and the state they share."""

    work: list                     # the jobs, without package facts
    order: list[int]               # indices into ``work``, largest file first
    ahead_order: list[int]         # the files to parse ahead, in the order to parse them
    translate: Callable            # (job, parsed or None) -> result
    parse: Callable                # job -> what ``translate`` takes as parsed, or None
    ready: Any                     # an Event: the package facts are in ``facts``
    facts: Any                     # an unnamed file: the pickled package facts
    lock: Any                      # guards the counters and ``state``
    ahead: Any                     # the next position in ``order`` to parse ahead
    ahead_bytes: Any               # source bytes parsed ahead so far
    state: Any                     # each job's state: FREE, RESERVED (to be parsed ahead) or CLAIMED
    free_cursor: Any               # no job before this position of ``order`` is FREE
    cursor: Any                    # every job before this position of ``order`` is CLAIMED
    parsers: Any                   # a Semaphore: workers parsing ahead at once (the free cores)


class Workers:
    """A process pool that parses ahead while this process scans the package (``results``
    then translates with the facts); leaving the block with an exception stops every worker."""

    def __init__(self, work: list, jobs: int, *, translate: Callable, parse: Callable):
        context = multiprocessing.get_context()
        cores = min(jobs, os.cpu_count() or 1)
        self._before = set(multiprocessing.active_children())
        sizes = [_size(job.source) for job in work]
        order = sorted(range(len(work)), key=lambda i: -sizes[i])
        self._shared = _Shared(
            work=work, order=order, ahead_order=[i for i in order if sizes[i] <= AHEAD_FILE_BYTES],
            translate=translate, parse=parse, ready=context.Event(), facts=_unnamed_file(),
            lock=context.Lock(), ahead=context.RawValue("l", 0), ahead_bytes=context.RawValue("q", 0),
            state=context.RawArray("b", len(work)), free_cursor=context.RawValue("l", 0),
            cursor=context.RawValue("l", 0),
            parsers=context.Semaphore(cores - 1) if cores > 1 else None,
        )
        self._pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_worker_start,
                                         initargs=(os.getpid(), self._shared))
        # one claim per job, submitted now: the pool forks its workers at the first submit. A
        # job carries nothing; the worker picks its file. Submitted one by one rather than by
        # ``map``: a ``map`` interrupted cancels its pending futures from this thread while the
        # pool's manager thread may be failing them as broken (CPython 3.11 then prints an
        # InvalidStateError traceback); ``shutdown`` cancels them from the manager thread itself
        self._futures = [self._pool.submit(_translate_claimed) for _ in work]

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if exc is None and self._shared.ready.is_set():
            self._pool.shutdown()
        else:  # Ctrl-C, SIGTERM (the CLI raises), a broken pool, no facts sent: no worker outlives the run
            self._stop()
        self._shared.facts.close()

    def results(self, package, progress: Callable[[Iterable, int], Iterable] | None = None) -> list:
        """Every job's result, in the order of the work, translated with ``package``."""
        # ``functions``: every module's function trees, for the pre-pass' own analyses (closed
        # over by now); megabytes to pickle that no translation reads
        blob = pickle.dumps(dataclasses.replace(package, functions=[]), protocol=pickle.HIGHEST_PROTOCOL)
        self._shared.facts.write(blob)
        self._shared.facts.flush()
        self._shared.ready.set()
        done: list = [None] * len(self._shared.work)
        answers = (future.result() for future in self._futures)
        for index, result in progress(answers, len(done)) if progress else answers:
            done[index] = result
        return done

    def _stop(self) -> None:
        pool = self._pool
        manager = getattr(pool, "_executor_manager_thread", None)  # shutdown(wait=False) forgets it
        results_pipe = getattr(getattr(pool, "_result_queue", None), "_writer", None)
        pool.shutdown(wait=False, cancel_futures=True)
        workers = set(multiprocessing.active_children()) - self._before
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.join(timeout=5)
        # A worker killed while sending its result leaves half a message in the pipe, and the
        # manager thread waits for the rest forever (the interpreter's exit then joins it, and
        # hangs). With every worker gone, this process holds the pipe's last write end: closed,
        # the wait ends in EOF, which the pool takes as broken.
        if results_pipe is not None:
            results_pipe.close()
        # the pool's manager thread sees its workers gone and ends; joined here, it cannot race
        # the interpreter's exit hook for the pool's wake-up pipe (CPython 3.11 then prints an
        # EBADF traceback at exit)
        if manager is not None:
            manager.join(timeout=10)


def _unnamed_file():
    """A file no one else can open, gone with the last process that holds it (Linux: in memory)."""
    if hasattr(os, "memfd_create"):
        return os.fdopen(os.memfd_create("tern-package-facts", os.MFD_CLOEXEC), "w+b")
    return tempfile.TemporaryFile()


def _size(path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0  # the translation reports it


# ---------------------------------------------------------------------------- in a worker

_SHARED: _Shared | None = None
_PACKAGE = None  # the package facts, read once
_PARSED: dict[int, object] = {}  # job index -> parsed ahead
_MINE: collections.deque[int] = collections.deque()  # the jobs this worker reserved to parse ahead, largest first


def _worker_start(parent: int, shared: _Shared) -> None:
    """A pool worker dies with its parent, even a SIGKILLed one (Linux: PR_SET_PDEATHSIG);
    Ctrl-C, which reaches the whole process group, is for the parent to handle. Then it
    parses ahead until the package facts are ready."""
    global _SHARED
    _SHARED = shared
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not a handler the CLI's process had when it forked
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the signal was asked for
        os._exit(1)
    if shared.parsers is not None:
        _parse_ahead(shared)


def _parse_ahead(shared: _Shared) -> None:
    """Parse the largest files not yet parsed (below ``AHEAD_FILE_BYTES``), while the facts
    are not ready and the budget lasts."""
    with collection.paused():  # parsed trees are kept, and parsing makes no cyclic garbage
        while not shared.ready.is_set():
            if not shared.parsers.acquire(timeout=0.02):
                continue
            try:
                with shared.lock:
                    position = shared.ahead.value
                    if position >= len(shared.ahead_order) or shared.ahead_bytes.value >= AHEAD_BYTES:
                        break
                    shared.ahead.value = position + 1
                    index = shared.ahead_order[position]
                    shared.state[index] = RESERVED
                    _MINE.append(index)  # this worker's to translate first, parsed or not
                parsed = shared.parse(shared.work[index])
                if parsed is not None:
                    _PARSED[index] = parsed
                    with shared.lock:
                        shared.ahead_bytes.value += len(parsed.raw)
            finally:
                shared.parsers.release()
    if gc.isenabled():
        gc.freeze()  # kept until translated: no collection needs to walk them


def _translate_claimed() -> tuple[int, Any]:
    """Claim a job (``_claim``) and translate it, with the package facts sent after the scan."""
    global _PACKAGE
    shared = _SHARED
    if _PACKAGE is None:
        shared.ready.wait()
        _PACKAGE = pickle.loads(os.pread(shared.facts.fileno(), os.fstat(shared.facts.fileno()).st_size, 0))
    index = _claim(shared)
    job = dataclasses.replace(shared.work[index], package=_PACKAGE)
    return index, shared.translate(job, _PARSED.pop(index, None))


def _claim(shared: _Shared) -> int:
    """The next file this worker parsed ahead; else the largest file nobody parsed ahead; else
    the largest one another worker did (its parse is lost, the order of sizes is kept)."""
    with shared.lock:
        while _MINE:
            index = _MINE.popleft()
            if shared.state[index] != CLAIMED:
                shared.state[index] = CLAIMED
                return index
            _PARSED.pop(index, None)  # another worker took it
        index = _next(shared, shared.free_cursor, FREE)
        if index is None:  # one claim per job: then a reserved one is left
            index = _next(shared, shared.cursor, RESERVED)
        shared.state[index] = CLAIMED
        return index


def _next(shared: _Shared, cursor, wanted: int) -> int | None:
    """The first job in ``order`` from ``cursor`` on in state ``wanted``, the cursor moved to it."""
    position = cursor.value
    while position < len(shared.order) and shared.state[shared.order[position]] != wanted:
        position += 1
    cursor.value = position
    return shared.order[position] if position < len(shared.order) else None
