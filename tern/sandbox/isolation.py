"""Keeping a job's code away from the files, network and processes it has no business with.

Two layers, because neither is enough alone:

* Outside, the *launcher* puts each worker process in namespaces (``detect`` picks the
  strongest that actually runs here, probed once):

  - ``bwrap``: bubblewrap. The whole filesystem read-only except the worker's scratch
    root, the JAX cache and the pool's writable roots; no network but a private loopback;
    a private PID namespace (when the worker dies, everything it started dies with the
    namespace); no capabilities. This is the real boundary.
  - ``unshare``: a user + network namespace only. No network; files and processes are
    guarded only by the audit hook and the pool's watchdog.
  - ``none``: the audit hook, rlimits and the watchdog only.

  ``TERN_SANDBOX=bwrap|unshare|none`` overrides the automatic choice. The host's ``/tmp``
  stays visible (read-only) under bwrap, because translations and their tests are often
  there; jobs get their own ``TMPDIR`` instead of a private ``/tmp``.

* Inside, ``Guard`` is a ``sys.addaudithook`` hook that turns writes outside the allowed
  directories, network sockets and process creation into ``PermissionError`` so that an
  honest mistake fails with a clear message. It is *bypassable* (``ctypes`` calls libc
  directly, and audit hooks are ordinary Python state); only the launcher's namespaces
  hold against code that tries.

Fork bombs: we run as root, and the kernel does not enforce RLIMIT_NPROC for root, nor
for any uid of a user namespace that maps to the host's root (checked with ``bwrap
--unshare-user --uid 1000``), so no rlimit contains them. The hook denies ``os.fork`` and
friends; a ``ctypes`` fork is caught by the pool's watchdog, which counts the worker's
descendants every ~200 ms, then stops and kills the tree and, once the launcher is reaped,
the rest of its process group. Under bwrap the PID namespace guarantees nothing survives;
at the weaker levels a process that calls ``setsid`` and is orphaned between two scans
escapes.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

LEVELS = ("bwrap", "unshare", "none")  # strongest first

_BWRAP_FLAGS = ("--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--die-with-parent", "--new-session", "--cap-drop", "ALL")
_UNSHARE = ("unshare", "--user", "--map-root-user", "--net", "--fork", "--kill-child")


def launcher(level: str, binds: Iterable[Path | str] = ()) -> list[str]:
    """The argv prefix that starts a command under ``level``; ``binds`` stay writable."""
    if level == "bwrap":
        argv = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for path in binds:
            argv += ["--bind", str(path), str(path)]
        return argv + list(_BWRAP_FLAGS)
    if level == "unshare":
        return _die_with_parent() + list(_UNSHARE)
    if level == "none":
        return _die_with_parent()
    raise ValueError(f"unknown isolation level {level!r}; expected one of {LEVELS}")


def _die_with_parent() -> list[str]:
    """Without it, a worker busy with a job outlives a tern process that was killed (bwrap has its own)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


@functools.cache
def _works(level: str) -> bool:
    try:
        done = subprocess.run([*launcher(level), "true"], capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def available() -> list[str]:
    """The levels whose probe runs here, strongest first."""
    return [level for level in LEVELS if _works(level)]


def detect(requested: str = "auto") -> str:
    """The isolation level to use: ``requested`` if it works; for "auto", ``$TERN_SANDBOX`` or the strongest.

    An explicit request that cannot be met raises ``RuntimeError``: silently running
    with weaker isolation than asked for would be worse than not running.
    """
    if requested == "auto":
        requested = os.environ.get("TERN_SANDBOX", "") or "auto"
    if requested == "auto":
        return available()[0]
    if requested not in LEVELS:
        raise ValueError(f"unknown isolation level {requested!r}; expected auto or one of {LEVELS}")
    if not _works(requested):
        raise RuntimeError(f"isolation level {requested!r} is not available here (probe failed)")
    return requested


# --- inside the worker -----------------------------------------------------------------

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# event -> ((index of a path argument, index of its dir_fd argument or None), ...)
_PATH_EVENTS = {
    "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.mkdir": ((0, 2),), "os.chmod": ((0, 2),),
    "os.chown": ((0, 3),), "os.utime": ((0, 3),), "os.truncate": ((0, None),), "shutil.rmtree": ((0, 1),),
    "os.rename": ((0, 2), (1, 3)), "os.link": ((1, 3),), "os.symlink": ((1, 2),),
}
_PROCESS_EVENTS = frozenset({"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "os.exec",
                             "subprocess.Popen", "_posixsubprocess.fork_exec"})


def _deny(what: str) -> PermissionError:
    return PermissionError(f"tern sandbox: {what} denied")


class Guard:
    """The worker's audit hook: the directories a job may write change per job.

    ``always`` holds the worker's own directories (its TMPDIR, the JAX cache); ``enter``
    adds a job's scratch and writable directories; ``trusted`` lets the worker do its
    own bookkeeping (removing a scratch tree) between jobs.
    """

    def __init__(self, always: Sequence[Path | str]):
        self._always = tuple(os.path.realpath(p) for p in always)
        self._allowed = self._always
        self._suspended = False
        self._pid = os.getpid()

    def install(self) -> None:
        import _posixsubprocess  # subprocess and multiprocessing fork through it without an audit event

        real = _posixsubprocess.fork_exec

        def fork_exec(*args, **kwargs):
            sys.audit("_posixsubprocess.fork_exec")
            return real(*args, **kwargs)

        _posixsubprocess.fork_exec = fork_exec
        sys.addaudithook(self._hook)

    def enter(self, dirs: Iterable[Path | str]) -> None:
        self._allowed = self._always + tuple(os.path.realpath(d) for d in dirs)

    def leave(self) -> None:
        self._allowed = self._always

    @contextlib.contextmanager
    def trusted(self) -> Iterator[None]:
        """The worker's own file handling (scratch trees, the output file) between jobs."""
        self._suspended = True
        try:
            yield
        finally:
            self._suspended = False

    def allows(self, path: str | bytes | os.PathLike, dir_fd: int | None = None) -> bool:
        path = os.fsdecode(path)
        if dir_fd is not None and not os.path.isabs(path):
            path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        real = os.path.realpath(path)
        return real == os.devnull or any(real == d or real.startswith(d + os.sep) for d in self._allowed)

    def _hook(self, event: str, args: tuple) -> None:
        if self._suspended:
            return
        if event == "open":
            path, _mode, flags = args
            if isinstance(flags, int) and flags & _WRITE_FLAGS and not isinstance(path, int) and not self.allows(path):
                raise _deny(f"writing {os.fsdecode(path)!r} (outside the job's directories)")
        elif event in _PATH_EVENTS:
            for index, fd_index in _PATH_EVENTS[event]:
                path = args[index]
                dir_fd = args[fd_index] if fd_index is not None else None
                if isinstance(path, (str, bytes, os.PathLike)) and not self.allows(path, dir_fd):
                    raise _deny(f"{event} on {os.fsdecode(path)!r} (outside the job's directories)")
        elif event == "socket.__new__":
            if args[1] != socket.AF_UNIX:
                raise _deny(f"creating a network socket (family {args[1]})")
        elif event in ("socket.connect", "socket.bind"):
            raise _deny(f"{event} to {args[1]!r}")
        elif event in _PROCESS_EVENTS:
            raise _deny(f"starting a process ({event})")
        elif event in ("os.kill", "os.killpg") and args[0] not in (self._pid, 0):
            raise _deny(f"signalling process {args[0]}")
