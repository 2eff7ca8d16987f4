"""The first process inside the ``unshare`` and ``none`` launchers: lock tern's state, drop
privileges, then stay as the worker's init.

``python -S confine.py [--readonly DIR]... [--writable DIR]... -- WORKER ARGV``

Run as a script, not as ``-m tern.sandbox.confine``: it imports the standard library and
``procfs`` only, so the init costs a few MB, not the sandbox's imports.

* Mounts (``unshare``: a private mount namespace in which we are root). Each directory is
  bind-mounted onto itself, read-only or writable, parents first, so the deeper of two
  wins: tern's state directory and the daemon's runtime directory are read-only, the
  worker's scratch root and the JAX cache inside them writable again. The rest of the
  filesystem stays as it is (that is what bubblewrap adds).
* Privileges: every capability dropped from the bounding, effective, permitted,
  inheritable and ambient sets, and ``no_new_privs``; so the job cannot undo the mounts
  (a user namespace it creates itself gets them locked).
* Init: the worker runs as our child; we are a child subreaper, so what a job orphans
  comes to us when the worker dies. In ``unshare``'s PID namespace we are PID 1 and the
  kernel kills the whole namespace when we exit; without one (``none``) we kill our
  descendants ourselves (a job that kills us first still escapes: ``none`` is best effort).
  Our exit status is the worker's, a fatal signal N as 128+N (as bwrap reports it).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

if __package__:
    from tern.sandbox import procfs
else:  # run as a script: its own directory is sys.path[0]
    import procfs  # type: ignore[no-redef]

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_NOATIME, _MS_NODIRATIME, _MS_BIND, _MS_REC, _MS_RELATIME = 32, 1024, 2048, 4096, 16384, 1 << 21
# statvfs f_flag -> the mount flag a remount must repeat (in a user namespace they are locked)
_KEEP = ((os.ST_NOSUID, _MS_NOSUID), (os.ST_NODEV, _MS_NODEV), (os.ST_NOEXEC, _MS_NOEXEC),
         (os.ST_NOATIME, _MS_NOATIME), (os.ST_NODIRATIME, _MS_NODIRATIME), (os.ST_RELATIME, _MS_RELATIME))
_PR_SET_PDEATHSIG, _PR_CAPBSET_DROP, _PR_SET_CHILD_SUBREAPER, _PR_SET_NO_NEW_PRIVS = 1, 24, 36, 38
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


class ConfineError(Exception):
    pass


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise ConfineError(f"{what}: {os.strerror(errno)}")


def mount_layers(layers: list[tuple[str, bool]]) -> None:
    """Bind each directory onto itself, read-only or writable, in the order given (parents first)."""
    for path, writable in layers:
        target = os.fsencode(path)
        _check(_libc.mount(target, target, None, _MS_BIND | _MS_REC, None), f"bind-mounting {path}")
        kept = os.statvfs(path).f_flag
        flags = _MS_BIND | _MS_REMOUNT | (0 if writable else _MS_RDONLY)
        flags |= sum(ms for st, ms in _KEEP if kept & st)
        _check(_libc.mount(None, target, None, flags, None), f"remounting {path} {'writable' if writable else 'read-only'}")


def drop_privileges() -> None:
    """No capability now nor after exec, and no way to gain one (setuid files included)."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EPERM without CAP_SETPCAP: nothing to drop then
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable; twice (v3 has 64 bits)
    _check(_libc.capset(header, data), "dropping capabilities")
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "setting no_new_privs")


def end_descendants(root: int, patience: float = 5.0) -> None:
    """SIGKILL every process below ``root`` (``root``'s view of /proc) and reap our children.

    ``root`` must be a child subreaper, so nothing below it can leave the tree; the scan
    stops every process before killing, so none forks in between, and repeats until no
    live descendant is left (killed ones wait as zombies for their new parent, us).
    """
    deadline = time.monotonic() + patience
    while True:
        live = procfs.live_descendants(root)
        if live:
            procfs.kill_descendants(root)
        reap_children()
        if not live or time.monotonic() > deadline:
            return
        time.sleep(0.005)


def reap_children() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _status(status: int) -> int:
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def serve_as_init(argv: list[str]) -> int:
    """Fork the worker, reap what comes to us, and end with it."""
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
        try:
            os.execvp(argv[0], argv)
        except OSError as error:
            print(f"tern confine: could not start {argv[0]}: {error}", file=sys.stderr, flush=True)
        os._exit(127)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)  # the pool's pipes belong to the worker alone
    os.dup2(devnull, 1)
    os.close(devnull)
    while True:
        pid, status = os.wait()
        if pid == child:
            break
    if parent != 1:  # in a PID namespace our exit kills the rest; without one, we must
        end_descendants(int(os.readlink("/proc/self")))
    return _status(status)


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: confine.py [--readonly DIR]... [--writable DIR]... -- COMMAND...", file=sys.stderr)
        return 2
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    if len(options) % 2 or any(flag not in ("--readonly", "--writable") for flag in options[::2]):
        print(f"tern confine: bad options {options}", file=sys.stderr)
        return 2
    layers = [(options[i + 1], options[i] == "--writable") for i in range(0, len(options), 2)]
    try:
        mount_layers(layers)
        drop_privileges()
    except (ConfineError, OSError) as error:
        print(f"tern confine: {error}", file=sys.stderr, flush=True)
        return 1
    return serve_as_init(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
