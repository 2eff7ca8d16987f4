"""What the tern server and its clients agree on without talking.

Where a project's daemon lives (one socket per user and project, in a private directory),
which tern it runs (a version key both sides compute from the source tree, so an edited
tern is never served by a stale daemon), whether a server is alive (an ``flock`` on a pid
file, which the kernel drops when the server dies, however it dies), and how a message
is framed (one JSON object per line; requests are data, never pickle).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import stat
import struct
import sys
from pathlib import Path
from typing import Any, NamedTuple

PROTOCOL = 1
MODES = ("auto", "never", "require")
LINE_LIMIT = 256 * 2**20  # StreamReader limit: a job's payload or result is one line
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path is 108 bytes including the NUL
_MARKERS = ("pyproject.toml", ".git")


def find_project(start: Path) -> Path:
    """The nearest ancestor with pyproject.toml or .git, else ``start``: the daemon is per project."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if any((folder / marker).exists() for marker in _MARKERS):
            return folder
    return start


class DaemonPaths(NamedTuple):  # not a dataclass: the thin client would pay 12 ms importing dataclasses
    project: Path
    socket: Path  # the server listens here
    pidfile: Path  # held with flock by the live server; never deleted (see ``server_pid``)
    startlock: Path  # held by a client while it starts a server, so two clients start one
    state: Path  # <project>/.tern: the Sandbox's state and the server log

    @property
    def log(self) -> Path:
        return self.state / "server.log"


def _runtime_dir() -> Path:
    """Per user, and short: sun_path allows 108 bytes. Not $TMPDIR, which differs between
    shells and would give one project two daemons."""
    fallback = Path(f"/tmp/tern-{os.getuid()}")
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if not (xdg and os.path.isabs(xdg) and os.path.isdir(xdg)):
        return fallback
    candidate = Path(xdg) / "tern"
    return candidate if len(os.fsencode(candidate)) + len("/0123456789abcdef.sock") <= _SUN_PATH_MAX else fallback


def private_dir() -> Path:
    """The per-user runtime directory of sockets and pid files, created private (0700).
    The sandbox keeps it read-only for jobs."""
    folder = _runtime_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    if info.st_uid != os.getuid() or not stat.S_ISDIR(info.st_mode):
        raise PermissionError(f"{folder} is not a directory owned by this user")
    if info.st_mode & 0o077:
        os.chmod(folder, 0o700)
    return folder


def paths_for(project: Path) -> DaemonPaths:
    """The files of ``project``'s daemon, creating the private runtime directory (0700)."""
    project = find_project(project)
    folder = private_dir()
    name = hashlib.sha256(os.fsencode(project)).hexdigest()[:16]
    return DaemonPaths(
        project=project,
        socket=folder / f"{name}.sock",
        pidfile=folder / f"{name}.pid",
        startlock=folder / f"{name}.start",
        state=project / ".tern",
    )


def _source_roots() -> list[Path]:
    roots = [Path(__file__).resolve().parents[1]]  # the tern package
    rules = importlib.util.find_spec("tern_rules")
    if rules is not None and rules.submodule_search_locations:
        roots.extend(Path(p) for p in rules.submodule_search_locations)
    return roots


def version_key() -> str:
    """tern's version plus a hash of its sources' paths, mtimes and sizes (stat only: cheap).

    The interpreter is part of the key too: a daemon started from another environment
    would import other libraries.
    """
    import importlib.metadata  # here, not on load: the thin client imports this module (27 ms)

    try:
        version = importlib.metadata.version("tern")
    except importlib.metadata.PackageNotFoundError:
        version = "0+unknown"
    digest = hashlib.sha256(f"{sys.executable}\0{sys.version}".encode())
    for root in _source_roots():
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for filename in sorted(filenames):
                if filename.endswith((".py", ".toml")):
                    path = os.path.join(dirpath, filename)
                    st = os.stat(path)
                    digest.update(f"{path}\0{st.st_mtime_ns}\0{st.st_size}\n".encode())
    return f"{version}+{digest.hexdigest()[:16]}"


def identity() -> dict[str, str]:
    """Which tern this process runs, as far as a client can tell cheaply: the interpreter
    and the source tree. A server answers a client's command only when both are its own
    and its sources are unchanged since it started (``version_key``)."""
    return {"executable": sys.executable, "python": sys.version, "tern": str(Path(__file__).resolve().parents[1])}


def resolve_mode(daemon: str) -> str:
    """TERN_DAEMON replaces the default ("auto"); an explicit "never" or "require" stands."""
    if daemon == "auto":
        daemon = os.environ.get("TERN_DAEMON", "").strip() or "auto"
    if daemon not in MODES:
        raise ValueError(f"daemon must be one of {MODES}, not {daemon!r}")
    return daemon


def try_lock(path: Path) -> int | None:
    """An fd holding an exclusive flock on ``path``, or None if another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def server_pid(paths: DaemonPaths) -> int | None:
    """The live server's pid, or None. Live means it holds the pid file's lock.

    The pid file is never unlinked: unlinking a lock file lets two processes lock two
    different inodes under one name.
    """
    if not paths.pidfile.exists():
        return None
    fd = try_lock(paths.pidfile)
    if fd is not None:
        os.close(fd)
        return None
    try:
        return int(json.loads(paths.pidfile.read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return -1  # locked but not yet written: a server is starting


def peer(sock: Any) -> tuple[int, int] | None:
    """(pid, uid) of the process at the other end of a Unix socket (Linux), else None."""
    import socket  # here: the thin client has its own socket, and this costs it 6 ms

    try:
        pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    except (AttributeError, OSError):
        return None
    return pid, uid


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    """One request or response; anything but a JSON object is a protocol error (ValueError)."""
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError("a message must be a JSON object")
    return message
