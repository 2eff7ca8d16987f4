"""``tern pr``: per package (or group) migrate into scratch, commit on ``tern/migrate-<name>``
when the translation changed, push, and open or update the pull request.

Order matters for "nothing lost": the commit and the local branch exist before the push,
and the push happens before any API call, so a failed push or a failed call leaves the
work on the local branch (and on the remote), and a rerun picks it up from there.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tern.errors import UsageError
from tern.pr import body as pr_body
from tern.pr.body import Context, Migrated
from tern.pr.branch import ForeignCommits
from tern.pr.branch import plan as plan_branch
from tern.pr.changes import why_migrate
from tern.pr.git import Git, GitError, Identity
from tern.pr.github import DEFAULT_API, ApiError, GitHub, Settings, web_url
from tern.pr.packages import (
    REPORT_SUFFIXES,
    Package,
    SelectionError,
    configured,
    discover,
    load_config,
    name_packages,
    resolve_paths,
    slug,
)
from tern.pr.pulls import PullRequests, Texts

REPO_NAME = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
DEFAULT_LABELS = ("tern", "migration")


class UnitError(RuntimeError):
    """One package (or group) failed; its message is the line the user sees."""


@dataclass
class Options:
    paths: list[Path] = field(default_factory=list)
    base: str | None = None
    remote: str | None = None
    group: str | None = None
    out_root: str | None = None
    discover: bool = False
    labels: list[str] | None = None
    verify: bool = True
    daemon: str = "auto"
    workers: int | None = None
    jobs: int = 1
    dry_run: bool = False
    repo: str | None = None
    api_url: str | None = None
    token_env: str | None = None
    comment: bool = True
    rebase: bool = False
    identity: Identity = field(default_factory=Identity)
    cwd: Path = Path(".")


@dataclass
class Unit:
    """What one pull request holds: one package, or a --group of them."""

    name: str
    packages: list[Package]

    @property
    def branch(self) -> str:
        return f"tern/migrate-{self.name}"


@dataclass(frozen=True)
class UnitResult:
    """What became of one unit's branch and pull request: the line the user sees."""

    branch: str
    action: str
    url: str = ""
    ok: bool = True


def version() -> str:
    try:
        return importlib.metadata.version("tern")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def open_pull_requests(options: Options, *, say: Callable[[str], None], note: Callable[[str], None],
        sleep: Callable[[float], None] = time.sleep) -> int:
    """Exit status: 0 done (or nothing to do), 1 a package failed (its work kept), 2 bad usage."""
    try:
        bot = Bot(options, say=say, note=note, sleep=sleep)
    except (UsageError, SelectionError, GitError) as exc:
        note(f"error: {exc}")
        return 2
    try:
        outcomes = bot.process(bot.select())
    except (UsageError, SelectionError) as exc:
        note(f"error: {exc}")
        return 2
    except (UnitError, GitError) as exc:
        note(f"error: {exc}")
        return 1
    finally:
        bot.close()
    for outcome in outcomes:
        say(f"{outcome.branch}: {outcome.action}" + (f" {outcome.url}" if outcome.url else ""))
    _step_summary(outcomes, options.dry_run)
    return 0 if all(o.ok for o in outcomes) else 1


class Bot:
    def __init__(self, options: Options, *, say, note, sleep):
        self.options, self.say, self.note = options, say, note
        self.version = version()
        try:
            self.git = Git.discover(options.cwd.resolve(), options.identity)
        except GitError as exc:
            raise UsageError(str(exc)) from None
        self.root = self.git.root
        self.config = load_config(self.root)
        self.base = options.base or self.config.base or "main"
        self.remote = options.remote or self.config.remote or "origin"
        self.group = options.group or self.config.group
        if self.group is not None and slug(self.group) != self.group:
            raise UsageError(f"--group {self.group!r}: use letters, digits, '.', '_' and '-' (it names the branch)")
        self.labels = list(options.labels if options.labels else self.config.labels or DEFAULT_LABELS)
        self.out_root = options.out_root or self.config.out_root
        if self.git.remote_url(self.remote) is None:
            raise UsageError(f"no git remote named {self.remote!r} in {self.root} (--remote)")
        self.settings = self._settings()
        self.github = None if options.dry_run else GitHub(self.settings, sleep=sleep)
        self.base_ref = f"refs/remotes/{self.remote}/{self.base}"

    def close(self) -> None:
        if self.github is not None:
            self.github.close()

    # ------------------------------------------------------------------ configuration

    def _settings(self) -> Settings:
        o, env = self.options, os.environ
        api_url = o.api_url or env.get("GITHUB_API_URL") or DEFAULT_API
        repo = o.repo or env.get("GITHUB_REPOSITORY") or _repo_from_url(self.git.remote_url(self.remote) or "")
        if o.token_env:
            token = env.get(o.token_env, "")
            missing = f"the environment variable {o.token_env} (--token-env) is not set"
        else:
            token = env.get("GITHUB_TOKEN") or env.get("GH_TOKEN") or ""
            missing = "no token: set GITHUB_TOKEN (or GH_TOKEN), or name the variable holding one with --token-env"
        if not o.dry_run:
            if not token:
                raise UsageError(missing)
            if not repo:
                raise UsageError(f"which repository? pass --repo OWNER/NAME or set GITHUB_REPOSITORY "
                                 f"(the remote {self.remote!r} is not a GitHub URL)")
        if repo and not REPO_NAME.match(repo):
            raise UsageError(f"--repo {repo!r}: expected OWNER/NAME")
        return Settings(api_url=api_url, repo=repo or "OWNER/REPO", token=token, version=self.version,
                        retry_delay=float(env.get("TERN_PR_RETRY_DELAY", "2")),
                        max_wait=float(env.get("TERN_PR_MAX_WAIT", "60")), graphql_url=env.get("GITHUB_GRAPHQL_URL"))

    # ------------------------------------------------------------------ selection

    def select(self) -> list[Unit]:
        o = self.options
        fetched = self.git.fetch(self.remote, [f"+refs/heads/{self.base}:{self.base_ref}",
                                               f"+refs/heads/tern/*:refs/remotes/{self.remote}/tern/*"])
        if not fetched.ok:
            raise UnitError(f"cannot fetch {self.base} from {self.remote}: {fetched.last_error()}")
        head, base_tip = self.git.rev("HEAD"), self.git.rev(self.base_ref)
        if head and base_tip and head != base_tip:
            self.note(f"note: the checkout (HEAD {head[:12]}) is not {self.remote}/{self.base} ({base_tip[:12]}): "
                      f"its sources are what gets migrated")
        if self.git.is_shallow():
            self.note("note: this clone is shallow; tern pr needs the history of the base and of its branches "
                      "(actions/checkout: fetch-depth: 0)")
        if o.paths:
            rels, auto = resolve_paths(self.root, o.paths), False
        else:
            auto = True
            if self.config.packages:
                rels = configured(self.root, self.config.packages)
            elif o.discover or self.config.discover:
                rels = discover(self.git)
            else:
                rels = []
            if not rels:
                self.say("nothing to migrate: no PATH given, no [tool.tern.pr] packages in pyproject.toml"
                         + (", and --discover found no TF package" if (o.discover or self.config.discover) else ", and no --discover"))
                return []
        packages = name_packages(rels, self.out_root)
        units = [Unit(self.group, packages)] if self.group else [Unit(p.name, [p]) for p in packages]
        if not auto:
            return units
        chosen = []
        for unit in units:
            why = why_migrate(self.git, unit.packages, branch=unit.branch, remote=self.remote, base_ref=self.base_ref,
                              version=self.version)
            if why:
                self.note(f"{unit.name}: {why}")
                chosen.append(unit)
            else:
                self.note(f"{unit.name}: sources unchanged since the last migration; skipped")
        if not chosen:
            self.say("nothing to migrate: every package's TF sources are unchanged since its last migration")
        return chosen

    # ------------------------------------------------------------------ per unit

    def process(self, units: list[Unit]) -> list[UnitResult]:
        outcomes = []
        for index, unit in enumerate(units):
            try:
                outcomes.append(self._unit(unit))
            except (UnitError, ForeignCommits, GitError) as exc:
                self.note(f"error: {unit.branch}: {exc}")
                outcomes.append(UnitResult(unit.branch, f"failed: {_one_line(exc)}", ok=False))
            except ApiError as exc:
                self.note(f"error: {unit.branch}: {exc}")
                outcomes.append(UnitResult(unit.branch, f"failed: {_one_line(exc)}", ok=False))
                if exc.fatal and index + 1 < len(units):
                    self.note(f"error: stopping: {len(units) - index - 1} more package(s) not attempted")
                    break
        return outcomes

    def _unit(self, unit: Unit) -> UnitResult:
        git, o, branch = self.git, self.options, unit.branch
        if git.current_branch() == f"refs/heads/{branch}":
            raise UnitError(f"{branch} is checked out in {self.root}; switch to another branch (tern pr never touches the checkout)")
        base_tip = git.rev(self.base_ref)
        if base_tip is None:
            raise UnitError(f"no {self.base_ref} after fetching (--base {self.base})")
        remote_tip = git.rev(f"refs/remotes/{self.remote}/{branch}")
        owned = [path for p in unit.packages for path in (*p.translation_paths, *p.verify_paths)]
        plan = plan_branch(git, branch=branch, base_tip=base_tip, remote_tip=remote_tip, owned=owned,
                           email=o.identity.email, rebase=o.rebase, remote=self.remote)
        if plan.note:
            self.note(f"{unit.name}: {plan.note}")
        scratch = self.root / ".tern" / "pr" / unit.name
        shutil.rmtree(scratch, ignore_errors=True)
        items, files = [], {}
        for package in unit.packages:
            self.note(f"{unit.name}: migrating {package.rel} -> {package.out_rel}")
            item, produced = self._migrate(package, scratch)
            items.append(item)
            files.update(produced)
        parent_tree = git.tree_of(plan.parent)
        translation = [path for p in unit.packages for path in p.translation_paths]
        changed = git.build_tree(parent_tree, translation, files) != parent_tree
        head, verified = plan.parent, False
        if changed:
            files.update(self._verify(items, scratch))
            verified = True
            tree = git.build_tree(parent_tree, owned, files)
            message = pr_body.commit_message(items, group=self.group, version=self.version, update=plan.parent != base_tip)
            head = git.commit_tree(tree, plan.parent, message)
        if o.dry_run:
            if not verified:
                self._verify(items, scratch)
            return self._show(unit, items, plan.parent, head, changed, base_tip, plan.lease)
        if head == base_tip:
            return UnitResult(branch, f"up to date: {self.remote}/{self.base} already holds this translation")
        local_tip = git.rev(f"refs/heads/{branch}")
        if local_tip != head:
            git.set_branch(branch, head, local_tip)
        pushed = head != remote_tip
        if pushed:
            result = git.push(self.remote, head, branch, lease=plan.lease)
            if not result.ok:
                raise UnitError(f"push to {self.remote} failed: {result.last_error()}; the commit {head[:12]} is kept "
                                f"on the local branch {branch}")
            self.note(f"{unit.name}: pushed {head[:12]} to {self.remote}/{branch}"
                      + (f" (replacing {remote_tip[:12]} with --force-with-lease)" if plan.lease else ""))
        return self._pull_request(unit, items, head, pushed=pushed, old=remote_tip, verified=verified, scratch=scratch)

    def _migrate(self, package: Package, scratch: Path) -> tuple[Migrated, dict[str, Path]]:
        from tern.engine.runner import migrate, write_atomic

        out = scratch / package.out_rel
        try:
            report = migrate(self.root / package.rel, out, jobs=self.options.jobs)
        except (OSError, ValueError) as exc:
            raise UnitError(f"migrating {package.rel}: {exc}") from None
        report = dataclasses.replace(report, source=package.rel, out=package.out_rel)
        written = [f.path for f in report.files] + ([report.support_module] if report.support_module else [])
        # files the run did not write (unreadable, skipped, links refused) are in the report, not on the branch
        files = {f"{package.out_rel}/{rel}": out / rel for rel in written if (out / rel).is_file()}
        for suffix, text in zip(REPORT_SUFFIXES, (report.to_json(), report.to_markdown())):
            path = scratch / (package.out_rel + suffix)
            write_atomic(path, text.encode())
            files[package.out_rel + suffix] = path
        source = self.git.source_tree(package.rel) or "none"
        return Migrated(package, report, source), files

    def _verify(self, items: list[Migrated], scratch: Path) -> dict[str, Path]:
        """Verify each translation in the sandbox; a verification that cannot run is noted
        (the pull request becomes a draft), never a reason to lose the migration."""
        if not self.options.verify:
            for item in items:
                item.verify_note = "skipped (--no-verify)"
            return {}
        import anyio

        from tern.engine.runner import write_atomic
        from tern.verify.cli import Target, verify_targets
        from tern.verify.report import to_json, to_markdown

        todo = []
        for item in items:
            if (self.root / item.package.rel / "__init__.py").is_file():
                todo.append(item)
            else:
                item.verify_note = "not verified: no __init__.py, not a package"
        if not todo:
            return {}
        targets = [Target((self.root / m.package.rel).resolve(), (scratch / m.package.out_rel).resolve()) for m in todo]
        self.note(f"verifying {', '.join(m.package.rel for m in todo)} (daemon {self.options.daemon})")
        try:
            reports, _ = anyio.run(lambda: verify_targets(targets, project=self.root, daemon=self.options.daemon,
                                                          use_cache=True, workers=self.options.workers))
        except Exception as exc:  # noqa: BLE001 - the PR still opens, as a draft that says why
            for item in todo:
                item.verify_note = f"verification could not run: {type(exc).__name__}: {_one_line(exc)}"
            return {}
        files = {}
        by_path = {Path(r.translated).resolve(): r for r in reports}
        for item, target in zip(todo, targets):
            report = by_path.get(target.translated)
            if report is None:
                item.verify_note = "verification returned no report"
                continue
            item.verification = dataclasses.replace(report, original=item.package.rel, translated=item.package.out_rel)
            for suffix, text in ((".tern-verify.json", to_json([item.verification])),
                                 (".tern-verify.md", to_markdown([item.verification]))):
                path = scratch / (item.package.out_rel + suffix)
                write_atomic(path, text.encode())
                files[item.package.out_rel + suffix] = path
        return files

    # ------------------------------------------------------------------ output

    def _context(self, head: str) -> Context:
        return Context(server=web_url(self.settings.api_url), repo=self.settings.repo, branch="", base=self.base,
                       remote=self.remote, head=head, version=self.version, group=self.group, labels=tuple(self.labels))

    def _show(self, unit: Unit, items: list[Migrated], parent: str, head: str, changed: bool, base_tip: str,
              lease: str | None) -> UnitResult:
        ctx = dataclasses.replace(self._context(head), branch=unit.branch)
        lines = [f"branch: {unit.branch} (base {self.remote}/{self.base} {base_tip[:12]})"]
        if changed:
            push = f"--force-with-lease (replacing {lease[:12]})" if lease else "fast-forward"
            lines += [f"commit: {head[:12]} on {parent[:12]}; push: {push}", "", "commit message:", "",
                      *("    " + line for line in self.git.check("log", "-1", "--format=%B", head).rstrip().splitlines()),
                      "", "diff stat:", self.git.diff_stat(parent, head).rstrip()]
        else:
            lines.append(f"commit: none, the translation is byte-identical to {parent[:12]}")
        draft = bool(pr_body.draft_reasons(items))
        lines += ["", f"pull request: {pr_body.title(items, self.group)}" + (" [draft]" if draft else ""),
                  f"labels: {', '.join(self.labels)}", "", pr_body.body(items, ctx)]
        self.say("\n".join(lines))
        return UnitResult(unit.branch, f"dry run: {'would push ' + head[:12] if changed else 'nothing changed'}; nothing pushed")

    # ------------------------------------------------------------------ the pull request

    def _pull_request(self, unit: Unit, items: list[Migrated], head: str, *, pushed: bool, old: str | None,
                      verified: bool, scratch: Path) -> UnitResult:
        def render() -> Texts:
            if not verified:
                self._verify(items, scratch)
            ctx = dataclasses.replace(self._context(head), branch=unit.branch)
            draft = bool(pr_body.draft_reasons(items))
            return Texts(pr_body.title(items, self.group), pr_body.body(items, ctx), draft, self._comment(items, old, head, draft))

        pulls = PullRequests(self.github, base=self.base, labels=self.labels, comment=self.options.comment, note=self.note)
        synced = pulls.sync(unit.branch, head, pushed=pushed, render=render)
        return UnitResult(unit.branch, synced.action, synced.url)

    def _comment(self, items: list[Migrated], old: str | None, head: str, draft: bool) -> str:
        stat = self.git.check("diff", "--shortstat", old, head).strip() if old else ""
        status = "; ".join(f"`{m.package.rel}`: " + (m.verification.status if m.verification else m.verify_note or "not verified")
                           for m in items)
        return (f"tern pushed {head[:12]}" + (f" ({stat})" if stat else "") + f". Verification: {status}. "
                + ("Still a draft: see the description." if draft else "Ready for review.")
                + f"\n\n<sub>tern {self.version}</sub>")


def _repo_from_url(url: str) -> str:
    match = re.search(r"[:/]([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$", url)
    return f"{match[1]}/{match[2]}" if match and ("github" in url or url.startswith("git@")) else ""


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def _step_summary(outcomes: list[UnitResult], dry_run: bool) -> None:
    """In GitHub Actions, the run's summary page lists what happened to each branch."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path or not outcomes:
        return
    lines = ["## tern pr" + (" (dry run)" if dry_run else ""), "", "| branch | result |", "| --- | --- |"]
    for o in outcomes:
        result = f"[{o.action}]({o.url})" if o.url else o.action
        lines.append(f"| `{o.branch}` | {result.replace('|', '/')} |")
    try:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    except OSError:
        pass
