"""Directory trees by content hash: what a job reads travels to another machine this way.

A job on a cluster node cannot read the driver's files. The trees it names (its
``sys_path`` entries and the directories its payload names) are packed once each, keyed
by the SHA-256 of their contents, and unpacked on the node into ``<root>/<digest>/``, where
a tree already there is never unpacked again. Paths then differ between driver and node,
so a job is rewritten on the way out and its answer on the way back (``PathMap``): the
driver sees the paths it would have seen locally.

Packing follows symbolic links (tern's link roots are a link to the package) and leaves
out ``__pycache__``; unpacking admits plain files and directories only (tarfile's "data"
filter), so an archive cannot write outside its directory.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_TREE_BYTES = 512 << 20  # a tree larger than this is not shipped: the job ends "error" saying so
_SKIP = ("__pycache__",)


class TreeTooLarge(ValueError):
    pass


def _files(root: Path) -> list[tuple[str, Path]]:
    """(relative path, path) of every regular file under ``root``, links followed, sorted."""
    found = []
    for folder, dirs, files in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP)
        for name in files:
            path = Path(folder, name)
            if path.is_file():
                found.append((str(path.relative_to(root)), path))
    return sorted(found)


def signature(root: Path) -> tuple:
    """Cheap stand-in for the contents (names, sizes, mtimes): packing is redone only when it changes."""
    entries = []
    for rel, path in _files(root):
        info = path.stat()
        entries.append((rel, info.st_size, info.st_mtime_ns))
    return tuple(entries)


def pack(root: Path) -> tuple[str, bytes]:
    """(digest, tar bytes) of the tree at ``root``; the digest depends on names, contents and
    the executable bit only, so the same tree packed anywhere has the same digest."""
    digest = hashlib.sha256()
    buffer = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for rel, path in _files(root):
            data = path.read_bytes()
            total += len(data)
            if total > MAX_TREE_BYTES:
                raise TreeTooLarge(f"{root} holds more than {MAX_TREE_BYTES >> 20} MB; too large to ship to a node")
            executable = bool(path.stat().st_mode & stat.S_IXUSR)
            digest.update(f"{rel}\0{len(data)}\0{int(executable)}\0".encode())
            digest.update(data)
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), 0o755 if executable else 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return digest.hexdigest(), buffer.getvalue()


def pack_files(root: Path) -> bytes:
    """A job's output directory, for the trip back (no digest: it is published once, by rename)."""
    return pack(root)[1]


def unpack(data: bytes, target: Path) -> None:
    """Extract ``data`` into ``target`` (which must not exist yet) through a sibling staging directory."""
    staging = target.with_name(f".{target.name}.{os.getpid()}-{time.monotonic_ns()}")
    staging.mkdir(parents=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            tar.extractall(staging, filter="data")
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def unpack_once(data_source: Any, store: Path, digest: str) -> Path:
    """``store/digest``, unpacked from ``data_source()`` unless already there (content-addressed:
    whoever unpacked it first, the contents are the same)."""
    target = store / digest
    if target.is_dir():
        return target
    try:
        unpack(data_source(), target)
    except OSError:
        if not target.is_dir():  # not a lost race with another unpacking of the same tree
            raise
    return target


@dataclass(frozen=True)
class PathMap:
    """Driver path prefixes and the node paths they stand for, applied to JSON values."""

    pairs: tuple[tuple[str, str], ...]  # (driver, node), longest driver path first

    @classmethod
    def of(cls, mapping: dict[str, str]) -> "PathMap":
        return cls(tuple(sorted(mapping.items(), key=lambda p: -len(p[0]))))

    def outward(self, value: Any) -> Any:
        """Driver paths to node paths: whole strings that are, or lie under, a mapped path."""
        if isinstance(value, str):
            for driver, node in self.pairs:
                if value == driver or value.startswith(driver + os.sep):
                    return node + value[len(driver):]
            return value
        return _map(value, self.outward)

    def back(self, value: Any) -> Any:
        """Node paths to driver paths anywhere in strings (tracebacks and messages quote them)."""
        if isinstance(value, str):
            for driver, node in self.pairs:
                value = value.replace(node, driver)
            return value
        return _map(value, self.back)


def _map(value: Any, fn: Any) -> Any:
    if isinstance(value, dict):
        return {fn(k) if isinstance(k, str) else k: fn(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(fn(v) for v in value)
    return value
