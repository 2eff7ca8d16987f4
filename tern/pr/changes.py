"""Has a package changed since its last migration? The bot's commits say what they migrated:

    Tern-Package: models/encoder
    Tern-Source: <git tree hash of models/encoder when it was migrated>
    Tern-Version: <tern's version>

so the question is one ``git log`` for the newest such commit (on the package's branch, or
merged into the base) and one tree hash of the package as it stands now.
"""

from __future__ import annotations

import re

from tern.pr.git import CommitInfo, Git
from tern.pr.packages import Package


def recorded(commit: CommitInfo, rel: str) -> tuple[str, str] | None:
    """(source tree, tern version) a bot commit records for package ``rel``; a group's
    commit holds one Tern-Package/Tern-Source pair per package, in order."""
    pairs = list(commit.trailers)
    for index, (key, value) in enumerate(pairs):
        if key == "Tern-Package" and value == rel:
            source = next((v for k, v in pairs[index + 1:] if k == "Tern-Source"), None)
            if source:
                return source, (commit.trailer("Tern-Version") or [""])[0]
    return None


def why_migrate(git: Git, packages: list[Package], *, branch: str, remote: str, base_ref: str, version: str) -> str:
    """Why an automatic run takes this branch's packages up ("" for not at all): a package
    whose sources or tern's version differ from its last migration, or a bot branch not
    merged yet (its pull request may need opening or refreshing)."""
    remote_branch = f"refs/remotes/{remote}/{branch}"
    refs = [r for r in (remote_branch, f"refs/heads/{branch}", base_ref) if git.rev(r)]
    for package in packages:
        hits = git.commits(" ".join(refs), max_count=1, grep=f"^Tern-Package: {_ere(package.rel)}$")
        found = recorded(hits[0], package.rel) if hits else None
        if found is None:
            return f"{package.rel} was never migrated"
        source, tern_version = found
        if source != git.source_tree(package.rel):
            return f"{package.rel} changed since {hits[0].sha[:12]}"
        if tern_version != version:
            return f"tern {version} differs from tern {tern_version} of the last migration"
    tip = git.rev(remote_branch)
    if tip and not git.is_ancestor(tip, base_ref):
        return f"{branch} is not merged yet"
    return ""


def _ere(text: str) -> str:
    """``text`` matched literally in a POSIX extended regex (git log -E --grep)."""
    return re.sub(r"([.\[\](){}*+?|^$\\])", r"\\\1", text)
