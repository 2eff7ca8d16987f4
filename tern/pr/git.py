"""The git commands ``tern pr`` needs, run as subprocesses; results come back as values.

Commits are built with plumbing (a private index file, ``hash-object``, ``write-tree``,
``commit-tree``, ``update-ref``): the user's checkout, index and current branch are never
touched, and only the paths handed in are ever committed (never ``.tern/`` or scratch).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

ZERO = "0" * 40


class GitError(RuntimeError):
    """A git command failed; the message is git's own last line, with the command."""


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0

    def last_error(self) -> str:
        lines = [line.strip() for line in (self.err or self.out).splitlines() if line.strip()]
        return lines[-1] if lines else f"exit {self.code}"


@dataclass(frozen=True)
class Identity:
    name: str = "tern-bot"
    email: str = "tern-bot@users.noreply.github.com"


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    author: str
    email: str
    subject: str
    parents: tuple[str, ...]
    trailers: tuple[tuple[str, str], ...]  # (key, value) for the Tern-* trailers, in order

    def trailer(self, key: str) -> list[str]:
        return [v for k, v in self.trailers if k == key]


class Git:
    def __init__(self, root: Path, identity: Identity = Identity()):
        self.root = root
        self.identity = identity

    @classmethod
    def discover(cls, path: Path, identity: Identity = Identity()) -> Git:
        probe = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path, capture_output=True, text=True, check=False)
        if probe.returncode != 0:
            raise GitError(f"{path}: not inside a git repository")
        return cls(Path(probe.stdout.strip()).resolve(), identity)

    def run(self, *args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
        full = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", **(env or {})}
        done = subprocess.run(["git", "--literal-pathspecs", *args], cwd=self.root, input=input, capture_output=True,
                              text=True, env=full, check=False)
        return Result(done.returncode, done.stdout, done.stderr)

    def check(self, *args: str, input: str | None = None, env: dict[str, str] | None = None) -> str:
        result = self.run(*args, input=input, env=env)
        if not result.ok:
            raise GitError(f"git {' '.join(args[:3])}: {result.last_error()}")
        return result.out

    # ------------------------------------------------------------------ refs and history

    def rev(self, ref: str) -> str | None:
        result = self.run("rev-parse", "--verify", "--quiet", ref + "^{commit}")
        return result.out.strip() if result.ok else None

    def tree_of(self, commit: str, path: str = "") -> str | None:
        result = self.run("rev-parse", "--verify", "--quiet", f"{commit}^{{tree}}" if not path else f"{commit}:{path}")
        return result.out.strip() if result.ok else None

    def is_ancestor(self, older: str, newer: str) -> bool:
        return self.run("merge-base", "--is-ancestor", older, newer).ok

    def current_branch(self) -> str | None:
        result = self.run("symbolic-ref", "--quiet", "HEAD")
        return result.out.strip() if result.ok else None

    def is_shallow(self) -> bool:
        return self.run("rev-parse", "--is-shallow-repository").out.strip() == "true"

    def commits(self, range_: str, *, max_count: int | None = None, grep: str | None = None) -> list[CommitInfo]:
        """Newest first. ``grep`` is an extended regex over the message."""
        fmt = "%H%x00%an%x00%ae%x00%s%x00%P%x00%(trailers:key=Tern-Package,key=Tern-Source,key=Tern-Version,separator=%x1f)%x1e"
        args = ["log", f"--format={fmt}"]
        if max_count:
            args.append(f"-n{max_count}")
        if grep:
            args += ["-E", f"--grep={grep}"]
        out = self.check(*args, *range_.split(), "--")
        found = []
        for record in out.split("\x1e"):
            record = record.strip("\n")
            if not record:
                continue
            sha, author, email, subject, parents, trailers = record.split("\x00")
            pairs = []
            for item in trailers.split("\x1f"):
                key, sep, value = item.partition(":")
                if sep:
                    pairs.append((key.strip(), value.strip()))
            found.append(CommitInfo(sha, author, email, subject, tuple(parents.split()), tuple(pairs)))
        return found

    def merge_tree(self, ours: str, theirs: str) -> str | None:
        """The tree an automatic merge would write, or None on conflicts."""
        result = self.run("merge-tree", "--write-tree", "--no-messages", ours, theirs)
        return result.out.split()[0] if result.ok and result.out.strip() else None

    # ------------------------------------------------------------------ remote

    def fetch(self, remote: str, refspecs: list[str]) -> Result:
        return self.run("fetch", "--no-tags", "--prune", "--quiet", remote, *refspecs)

    def push(self, remote: str, sha: str, branch: str, *, lease: str | None = None) -> Result:
        args = ["push", "--porcelain", remote, f"{sha}:refs/heads/{branch}"]
        if lease is not None:
            args.insert(1, f"--force-with-lease=refs/heads/{branch}:{lease}")
        return self.run(*args)

    def remote_url(self, remote: str) -> str | None:
        result = self.run("remote", "get-url", remote)
        return result.out.strip() if result.ok else None

    # ------------------------------------------------------------------ building commits

    def source_tree(self, rel: str) -> str | None:
        """The tree hash of directory ``rel`` as it stands in the working tree (git's
        ignore rules applied): equal to ``HEAD:rel`` when the checkout is clean."""
        with self._index() as env:
            if self.rev("HEAD"):
                self.check("read-tree", "HEAD", env=env)
            self.check("add", "-A", "--", rel, env=env)
            result = self.run("write-tree", f"--prefix={rel}/", env=env)
        return result.out.strip() if result.ok else None

    def build_tree(self, base_tree: str, remove: list[str], files: dict[str, Path]) -> str:
        """``base_tree`` with the paths in ``remove`` (files or directories) dropped and
        ``files`` (repository path -> file on disk) added."""
        with self._index() as env:
            self.check("read-tree", base_tree, env=env)
            if remove:
                self.check("rm", "--cached", "-r", "-q", "--ignore-unmatch", "--", *remove, env=env)
            if files:
                paths = list(files)
                blobs = self.check("hash-object", "-w", "--no-filters", "--stdin-paths",
                                   input="".join(f"{files[p]}\n" for p in paths)).split()
                records = "".join(
                    f"{'100755' if os.access(files[p], os.X_OK) else '100644'} {blob}\t{p}\0" for p, blob in zip(paths, blobs))
                self.check("update-index", "-z", "--add", "--index-info", input=records, env=env)
            return self.check("write-tree", env=env).strip()

    def commit_tree(self, tree: str, parent: str, message: str) -> str:
        who = self.identity
        env = {"GIT_AUTHOR_NAME": who.name, "GIT_AUTHOR_EMAIL": who.email,
               "GIT_COMMITTER_NAME": who.name, "GIT_COMMITTER_EMAIL": who.email}
        return self.check("-c", f"user.name={who.name}", "-c", f"user.email={who.email}",
                          "commit-tree", tree, "-p", parent, "-F", "-", input=message, env=env).strip()

    def set_branch(self, branch: str, sha: str, old: str | None) -> None:
        self.check("update-ref", "-m", "tern pr", f"refs/heads/{branch}", sha, old or ZERO)

    def diff_stat(self, old: str, new: str) -> str:
        return self.check("diff", "--stat=100", "--summary", old, new)

    def changed_paths_in(self, old: str, new: str, paths: list[str]) -> list[str]:
        return [p for p in self.check("diff", "--name-only", "-z", old, new, "--", *paths).split("\0") if p]

    def _index(self):
        return _TempIndex(self.root)


class _TempIndex:
    """A private index file, so that building a tree never touches the user's index."""

    def __init__(self, root: Path):
        self.root = root

    def __enter__(self) -> dict[str, str]:
        fd, self.path = tempfile.mkstemp(prefix="tern-pr-index-")
        os.close(fd)
        os.unlink(self.path)  # git creates it; an empty file is not a valid index
        return {"GIT_INDEX_FILE": self.path}

    def __exit__(self, *exc) -> None:
        for suffix in ("", ".lock"):
            try:
                os.unlink(self.path + suffix)
            except FileNotFoundError:
                pass
