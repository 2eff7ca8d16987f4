"""The worker's process tree, read from /proc: what the pool's watchdog measures and kills.

A job's resource use is the whole tree under the launcher (bwrap or unshare, then the
worker, then anything a job forked past the audit hook), so memory is summed over it and a
kill reaches all of it. This kernel has no ``/proc/<pid>/task/*/children``, hence the scan
of every ``/proc/<pid>/stat`` (about 1.5 ms for 70 processes), done only every few polls.
"""

from __future__ import annotations

import os
import signal

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat(pid: int | str) -> list[bytes] | None:
    """The fields after ``(comm)`` in /proc/<pid>/stat: [0] state, [1] ppid, [11] utime, [12] stime."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(b")") + 2:].split()


def parents() -> dict[int, int]:
    """pid -> ppid for every process we can see."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := _stat(name)) is not None:
            table[int(name)] = int(fields[1])
    return table


def descendants(root: int, table: dict[int, int] | None = None) -> list[int]:
    """Every process below ``root``, parents before children."""
    table = parents() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, ppid in table.items():
        children.setdefault(ppid, []).append(pid)
    found, queue = [], [root]
    while queue:
        for child in sorted(children.get(queue.pop(0), ())):
            found.append(child)
            queue.append(child)
    return found


def live_descendants(root: int) -> list[int]:
    """``descendants`` without the zombies (killed, waiting to be reaped)."""
    return [pid for pid in descendants(root) if (fields := _stat(pid)) is not None and fields[0] != b"Z"]


def chain(root: int) -> list[int]:
    """``root`` and its line of only children down to the leaf: launcher(s), then the worker."""
    table, line = parents(), [root]
    while kids := [pid for pid, ppid in table.items() if ppid == line[-1]]:
        line.append(min(kids))
    return line


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (all its threads); 0.0 once it is gone."""
    fields = _stat(pid)
    return 0.0 if fields is None else (int(fields[11]) + int(fields[12])) / _TICK


def rss_mb(pids: list[int]) -> float:
    """Summed resident set size. Forked children share pages with their parent and are
    counted in full: an overestimate, but a legitimate job forks nothing."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total * _PAGE / 2**20


def kill_tree(root: int, spare: list[int] | tuple[int, ...] = ()) -> None:
    """SIGKILL ``root``'s process group and descendants, except the ``spare`` launchers.

    Everything is stopped first, so nothing forks between the scan and the kill (and a
    stopped process keeps its children attached, so the second scan sees the whole tree).
    The spared launchers (bwrap, unshare) are then continued: each reaps the worker it
    started and exits, so no zombie is left to the system's init.
    """
    for target in (-root, *descendants(root)):
        _signal(target, signal.SIGSTOP)
    doomed = [pid for pid in descendants(root) if pid not in spare]
    for target in ([] if root in spare else [-root]) + doomed:
        _signal(target, signal.SIGKILL)
    for pid in spare:
        _signal(pid, signal.SIGCONT)


def kill_descendants(root: int) -> None:
    """SIGKILL every process below ``root``, sparing ``root`` itself (a worker or init ending
    what a job left). Stopped first, as in ``kill_tree``."""
    for pid in descendants(root):
        _signal(pid, signal.SIGSTOP)
    for pid in descendants(root):
        _signal(pid, signal.SIGKILL)


def mentioning(marker: str) -> dict[int, int]:
    """pid -> ppid of the live processes (zombies aside) whose command line mentions ``marker``."""
    needle, found = marker.encode(), {}
    for pid, ppid in parents().items():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if needle not in f.read():
                    continue
        except OSError:
            continue
        if (fields := _stat(pid)) is not None and fields[0] != b"Z":
            found[pid] = ppid
    return found


def kill_orphans(marker: str) -> int:
    """SIGKILL processes left to init whose command line mentions ``marker``; return how many.

    They are what a killed tern leaves behind when it dies while bwrap is still setting up
    a worker (bwrap arms its parent-death signal in the sandbox only after that set-up).
    """
    orphans = [pid for pid, ppid in mentioning(marker).items() if ppid == 1]
    for pid in orphans:
        _signal(pid, signal.SIGKILL)
    return len(orphans)


def kill_group(leader: int) -> None:
    """SIGKILL what is left of a process group whose leader has been reaped."""
    _signal(-leader, signal.SIGKILL)


def _signal(target: int, sig: int) -> None:
    try:
        os.kill(target, sig)
    except (ProcessLookupError, PermissionError):
        pass
