"""Open or update one branch's pull request so that it describes the branch's head commit.

The body ends with a marker naming the commit it describes: a pull request whose marker
is the head already is left alone (no update, no comment), and a body left stale by a
failed run is refreshed by the next one. Texts are rendered only when needed, because
rendering may first have to verify the translation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tern.pr.body import head_of
from tern.pr.github import ApiError, GitHub, already_exists, validation_errors


@dataclass(frozen=True)
class Texts:
    title: str
    body: str
    draft: bool
    comment: str  # posted when a new commit updates an existing pull request


@dataclass(frozen=True)
class Synced:
    action: str
    url: str = ""


class PullRequests:
    def __init__(self, github: GitHub, *, base: str, labels: list[str], comment: bool, note: Callable[[str], None]):
        self.github, self.base, self.labels, self.comment, self.note = github, base, labels, comment, note

    def sync(self, branch: str, head: str, *, pushed: bool, render: Callable[[], Texts]) -> Synced:
        gh = self.github
        pr = gh.find_pull(branch)
        if pr is not None and head_of(pr.get("body")) == head:
            return Synced(f"up to date: #{pr['number']}", pr.get("html_url", ""))
        if pr is None and not pushed:
            closed = self._closed_for(branch, head)
            if closed is not None:
                return Synced(f"not reopened: #{closed['number']} was closed without merging for this same commit "
                              f"(a source change opens a new one)", closed.get("html_url", ""))
        texts = render()
        if pr is None:
            try:
                pr = self._create(branch, texts)
                action = f"opened #{pr['number']}" + (" (draft)" if pr.get("draft") else "")
            except ApiError as exc:
                if not already_exists(exc):
                    raise
                pr = gh.find_pull(branch)  # opened meanwhile, by another run: take it over
                if pr is None:
                    raise
                pr = self._update(pr, texts)
                action = f"updated #{pr['number']} (it existed already)"
        else:
            pr = self._update(pr, texts)
            action = f"updated #{pr['number']}"
            if pushed and self.comment:
                gh.comment(pr["number"], texts.comment)
        have = {label["name"] if isinstance(label, dict) else label for label in pr.get("labels", [])}
        missing = [label for label in self.labels if label not in have]
        if missing:
            gh.add_labels(pr["number"], missing)
        return Synced(action, pr.get("html_url", ""))

    def _create(self, branch: str, texts: Texts) -> dict:
        try:
            return self.github.create_pull(title=texts.title, head=branch, base=self.base, body=texts.body, draft=texts.draft)
        except ApiError as exc:
            if texts.draft and exc.status == 422 and "draft" in validation_errors(exc.body).lower() + str(exc).lower():
                self.note(f"note: {branch}: draft pull requests are not available here; opening a ready one")
                return self.github.create_pull(title=texts.title, head=branch, base=self.base, body=texts.body, draft=False)
            raise

    def _update(self, pr: dict, texts: Texts) -> dict:
        """Title and body over REST; the draft flag over GraphQL (REST cannot change it)."""
        updated = self.github.update_pull(pr["number"], title=texts.title, body=texts.body)
        if bool(pr.get("draft")) != texts.draft and pr.get("node_id"):
            try:
                self.github.set_draft(pr["node_id"], texts.draft)
                updated["draft"] = texts.draft
            except ApiError as exc:
                if exc.fatal:
                    raise
                self.note(f"note: #{pr['number']}: could not mark it {'draft' if texts.draft else 'ready'}: {exc}")
        return {**pr, **updated}

    def _closed_for(self, branch: str, head: str) -> dict | None:
        """A pull request a person closed without merging, for this very commit."""
        closed = self.github.request("GET", f"/repos/{self.github.settings.repo}/pulls",
                                     params={"head": f"{self.github.owner}:{branch}", "state": "closed", "per_page": "10"})
        return next((p for p in closed or [] if not p.get("merged_at") and head_of(p.get("body")) == head), None)
