"""Keeping a job's code away from tern's state, the network and processes it has no business with.

Two layers, because neither is enough alone:

* Outside, the *launcher* puts each worker process in namespaces (``detect`` picks the
  strongest that actually runs here, probed once):

  - ``bwrap``: bubblewrap. The whole filesystem read-only except the worker's scratch
    root, the JAX cache and the pool's writable roots; no network but a private loopback;
    a private PID namespace (when the worker dies, everything it started dies with the
    namespace); no capabilities. This is the real boundary.
  - ``unshare``: user, network, mount and PID namespaces, entered through ``confine.py``:
    tern's state directory and the daemon's runtime directory are read-only (the rest of
    the filesystem is not), no network, no capabilities, and the job's processes cannot
    outlive the worker nor signal anything outside.
  - ``none``: the audit hook, rlimits, the watchdog and ``confine.py``'s init only.

  Whatever the level, the state directory (``.tern``: the cache, recordings, other
  workers' scratch) and the runtime directory (the daemon's socket) are passed as
  ``readonly``: they stay read-only even under a writable root, except the directories
  passed as ``writable`` below them (the deeper of two wins). ``TERN_SANDBOX=bwrap|unshare|none``
  overrides the automatic choice. The host's ``/tmp`` stays visible (read-only) under
  bwrap, because translations and their tests are often there; jobs get their own
  ``TMPDIR`` instead of a private ``/tmp``.

* Inside, ``Guard`` is a ``sys.addaudithook`` hook that turns writes outside the allowed
  directories (``open``, ``os`` file calls, ``shutil``, ``tempfile``, ``sqlite3``), network
  sockets and process creation into ``PermissionError`` so that an honest mistake fails
  with a clear message. It is *bypassable* (``ctypes`` calls libc directly, and audit hooks
  are ordinary Python state); only the launcher's namespaces hold against code that tries.

Processes a job starts past the hook: the worker is a child subreaper and kills all its
descendants after every job (``worker.Worker``), so a process that calls ``setsid`` and is
orphaned still dies with its job. Fork bombs: we run as root, and the kernel does not
enforce RLIMIT_NPROC for root, nor for any uid of a user namespace that maps to the host's
root, so no rlimit contains them. The hook denies ``os.fork`` and friends; a ``ctypes``
fork is caught by the pool's watchdog, which counts the worker's descendants every ~200 ms,
then stops and kills the tree. Under bwrap and unshare the PID namespace guarantees
nothing survives the worker; at ``none`` a job that kills its worker and init first can
leave a process behind.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

LEVELS = ("bwrap", "unshare", "none")  # strongest first

_BWRAP_FLAGS = ("--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--die-with-parent", "--new-session", "--cap-drop", "ALL")
_UNSHARE = ("unshare", "--user", "--map-root-user", "--net", "--mount", "--pid", "--fork", "--kill-child")
_CONFINE = Path(__file__).with_name("confine.py")
_NO_BUBBLEWRAP = "tests run without a read-only filesystem; install bubblewrap (apt-get install bubblewrap) for full isolation"
WARNINGS = {
    "bwrap": "",
    "unshare": f"isolation unshare: {_NO_BUBBLEWRAP}",
    "none": (f"isolation none: {_NO_BUBBLEWRAP}; tern's own state, the network and host processes are "
             "guarded only by an in-process hook that ctypes bypasses"),
}


def warning(level: str) -> str:
    """What a user should know about ``level`` ("" at full isolation)."""
    return WARNINGS.get(level, f"isolation {level}: unknown level")


def pid_namespace(level: str) -> bool:
    """Whether workers at ``level`` run in a PID namespace of their own (an init as PID 1, the worker PID 2)."""
    return level in ("bwrap", "unshare")


def layers(writable: Iterable[Path | str], readonly: Iterable[Path | str]) -> list[tuple[str, bool]]:
    """(directory, writable) in mount order: parents first; for one directory named both ways, read-only wins."""
    found = {os.path.realpath(p): False for p in readonly if os.path.isdir(p)}
    for path in writable:
        found.setdefault(os.path.realpath(path), True)
    return sorted(found.items(), key=lambda item: (item[0].rstrip(os.sep).count(os.sep), item[0]))


def launcher(level: str, writable: Iterable[Path | str] = (), readonly: Iterable[Path | str] = ()) -> list[str]:
    """The argv prefix that starts a command under ``level``.

    ``writable`` directories can be written; ``readonly`` ones (tern's state) cannot, even
    below a writable one, except where a deeper ``writable`` one reopens them. Under
    ``none`` only the audit hook enforces either.
    """
    order = layers(writable, readonly)
    if level == "bwrap":
        argv = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for path, can_write in order:
            argv += ["--bind" if can_write else "--ro-bind", path, path]
        return argv + list(_BWRAP_FLAGS)
    if level == "unshare":
        mounts = [arg for path, can_write in order for arg in ("--writable" if can_write else "--readonly", path)]
        return _die_with_parent() + list(_UNSHARE) + [sys.executable, "-S", str(_CONFINE), *mounts, "--"]
    if level == "none":
        return _die_with_parent() + [sys.executable, "-S", str(_CONFINE), "--"]
    raise ValueError(f"unknown isolation level {level!r}; expected one of {LEVELS}")


def _die_with_parent() -> list[str]:
    """Without it, a worker busy with a job outlives a tern process that was killed (bwrap has its own)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


@functools.cache
def _works(level: str) -> bool:
    """The level starts ``true``, read-only mounts included (a container may refuse them)."""
    try:
        done = subprocess.run([*launcher(level, readonly=[tempfile.gettempdir()]), "true"], capture_output=True,
                              timeout=20, check=False)
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
# event -> ((index of a path argument, index of its dir_fd argument or None), ...): each path
# must lie in the job's directories. A link's source too: writing through a hard link in
# scratch would write the file outside. "tern.*" events are raised by ``Guard.install``'s
# wrappers, for calls CPython does not audit (or audits without their dir_fd).
_PATH_EVENTS = {
    "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.mkdir": ((0, 2),), "os.chmod": ((0, 2),),
    "os.chown": ((0, 3),), "os.utime": ((0, 3),), "os.truncate": ((0, None),), "os.chflags": ((0, None),),
    "os.setxattr": ((0, None),), "os.removexattr": ((0, None),),
    "os.rename": ((0, 2), (1, 3)), "os.link": ((0, 2), (1, 3)), "os.symlink": ((1, 2),),
    "shutil.rmtree": ((0, 1),), "shutil.copyfile": ((1, None),), "shutil.copytree": ((1, None),),
    "shutil.move": ((0, None), (1, None)), "shutil.chown": ((0, None),),
    "tempfile.mkstemp": ((0, None),), "tempfile.mkdtemp": ((0, None),),
    "tern.os.open": ((0, 2),), "tern.os.mkfifo": ((0, 1),), "tern.os.mknod": ((0, 1),),
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
        """Wrap what forks or writes without an audit event of its own, then add the hook."""
        import _posixsubprocess  # noqa: PLC2701 - subprocess and multiprocessing fork through it without an audit event

        fork_exec = _posixsubprocess.fork_exec
        _posixsubprocess.fork_exec = _audited(fork_exec, lambda *a, **k: ("_posixsubprocess.fork_exec",))
        real_open = os.open
        os.open = _audited(real_open, lambda path, flags, *a, dir_fd=None, **k:  # the "open" event omits dir_fd
                           ("tern.os.open", path, flags, dir_fd) if dir_fd is not None and flags & _WRITE_FLAGS else None)
        os.mkfifo = _audited(os.mkfifo, lambda path, *a, dir_fd=None, **k: ("tern.os.mkfifo", path, dir_fd))
        os.mknod = _audited(os.mknod, lambda path, *a, dir_fd=None, **k: ("tern.os.mknod", path, dir_fd))
        import sqlite3  # "sqlite3.connect" is audited; ATTACH and VACUUM INTO open files from SQL, unaudited

        connect = sqlite3.connect

        def connect_authorized(*args, **kwargs):
            connection = connect(*args, **kwargs)
            connection.set_authorizer(self._authorize_sql)
            return connection

        sqlite3.connect = sqlite3.dbapi2.connect = functools.wraps(connect)(connect_authorized)
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
        if isinstance(dir_fd, int) and dir_fd >= 0 and not os.path.isabs(path):  # CPython audits "no dir_fd" as -1
            try:
                path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
            except OSError:
                return False
        real = os.path.realpath(path)
        return real == os.devnull or any(real == d or real.startswith(d + os.sep) for d in self._allowed)

    def allows_database(self, database: str | bytes | os.PathLike | None) -> bool:
        """An in-memory or temporary database, or a file in the job's directories (even to read:
        SQLite writes beside a database it reads, its -shm and -journal files)."""
        if database is None:  # ATTACH of an expression: the file is not known when the statement is prepared
            return False
        name = os.fsdecode(database)
        if name.startswith("file:"):
            parts = urllib.parse.urlsplit(name)
            if "memory" in urllib.parse.parse_qs(parts.query).get("mode", ()):
                return True
            name = urllib.parse.unquote(parts.path)
        return name in ("", ":memory:") or self.allows(name)

    def _authorize_sql(self, action: int, arg1: str | None, *_: object) -> int:
        import sqlite3

        if action == sqlite3.SQLITE_ATTACH and not self._suspended and not self.allows_database(arg1):
            return sqlite3.SQLITE_DENY  # "not authorized"
        return sqlite3.SQLITE_OK

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
                    raise _deny(f"{event.removeprefix('tern.')} on {os.fsdecode(path)!r} (outside the job's directories)")
        elif event == "sqlite3.connect":
            if not self.allows_database(args[0]):
                raise _deny(f"sqlite3.connect on {os.fsdecode(args[0])!r} (outside the job's directories; "
                            "copy a database into the scratch directory to read it)")
        elif event == "socket.__new__":
            if args[1] != socket.AF_UNIX:
                raise _deny(f"creating a network socket (family {args[1]})")
        elif event in ("socket.connect", "socket.bind"):
            raise _deny(f"{event} to {args[1]!r}")
        elif event in _PROCESS_EVENTS:
            raise _deny(f"starting a process ({event})")
        elif event in ("os.kill", "os.killpg") and args[0] not in (self._pid, 0):
            raise _deny(f"signalling process {args[0]}")


def _audited(function, event):
    """``function``, raising the audit event ``event(*args, **kwargs)`` returns (if any) before each call."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if (raised := event(*args, **kwargs)) is not None:
            sys.audit(*raised)
        return function(*args, **kwargs)

    return wrapper
