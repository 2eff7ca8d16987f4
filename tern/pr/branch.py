"""Where the bot's next commit goes, and the rules that keep it from overwriting people.

A commit is the bot's when it carries a ``Tern-Package`` trailer and the bot's author
e-mail. A merge commit that is exactly what git's automatic merge of its parents writes
(GitHub's "Update branch" button) adds nothing of a person's and is accepted too.
Anything else on ``tern/migrate-<name>`` beyond the base is a person's work: the bot stops.

The next commit goes on top of the remote branch (a fast-forward push). The branch is
replaced (``--force-with-lease`` on the exact commit seen) only when every commit on it
is the bot's and either ``--rebase`` asks for it or the base already holds the branch's
translation (a squash merge left the branch behind).
"""

from __future__ import annotations

from dataclasses import dataclass

from tern.pr.git import CommitInfo, Git


class ForeignCommits(RuntimeError):
    """The branch holds commits the bot did not make."""

    def __init__(self, where: str, commits: list[CommitInfo]):
        shown = "; ".join(f"{c.sha[:12]} {c.subject!r} by {c.author} <{c.email}>" for c in commits[:5])
        more = f" and {len(commits) - 5} more" if len(commits) > 5 else ""
        super().__init__(f"{where} has {len(commits)} commit(s) not made by tern: {shown}{more}; tern stops here and "
                         f"pushes nothing (merge or close the pull request, or delete the branch, to hand it back)")
        self.commits = commits


@dataclass(frozen=True)
class Plan:
    parent: str  # the commit the next commit goes on
    remote_tip: str | None  # the remote branch as fetched
    lease: str | None  # set: the push replaces the remote branch, expecting it at this commit
    note: str = ""


def is_bot(commit: CommitInfo, email: str) -> bool:
    return bool(commit.trailer("Tern-Package")) and commit.email.lower() == email.lower()


def foreign(git: Git, range_: str, email: str) -> list[CommitInfo]:
    found = []
    for commit in git.commits(range_):
        if is_bot(commit, email):
            continue
        if len(commit.parents) == 2 and git.merge_tree(*commit.parents) == git.tree_of(commit.sha):
            continue  # an automatic merge (e.g. GitHub's "Update branch"): nobody's edit
        found.append(commit)
    return found


def plan(git: Git, *, branch: str, base_tip: str, remote_tip: str | None, owned: list[str], email: str,
         rebase: bool, remote: str) -> Plan:
    """Choose the parent of the next commit; raise ForeignCommits rather than touch a
    person's commit, on the remote branch or on the local one."""
    if remote_tip is None:
        upstream, lease, note = base_tip, None, ""
    else:
        people = foreign(git, f"{base_tip}..{remote_tip}", email)
        if people:
            raise ForeignCommits(f"{remote}/{branch}", people)
        if git.is_ancestor(remote_tip, base_tip):
            upstream, lease, note = base_tip, None, "the branch is merged into the base: starting again from the base"
        elif rebase:
            upstream, lease, note = base_tip, remote_tip, "--rebase: rebuilding the branch on the base"
        elif owned and not git.changed_paths_in(base_tip, remote_tip, owned):
            upstream, lease, note = base_tip, remote_tip, "the base already holds the branch's translation: rebuilding on the base"
        else:
            upstream, lease, note = remote_tip, None, ""
    local_tip = git.rev(f"refs/heads/{branch}")
    if local_tip is None or local_tip == upstream:
        return Plan(upstream, remote_tip, lease, note)
    mine = f"{upstream}..{local_tip}" if remote_tip is None else f"{upstream}..{local_tip} ^{remote_tip}"
    people = foreign(git, mine, email)
    if people:
        raise ForeignCommits(f"the local branch {branch}", people)
    if git.is_ancestor(upstream, local_tip):  # the bot's commit of an earlier run that was not pushed
        return Plan(local_tip, remote_tip, lease, note or "continuing from the local branch (not pushed before)")
    return Plan(upstream, remote_tip, lease, note)
