"""``tern pr`` the way a CI bot runs it: real git (a working clone and a bare remote in
tmp_path) and a loopback GitHub API (tests/pr_fake_github.py) that checks every request.

Most runs go through typer's CliRunner with ``--no-verify`` (no sandbox); one runs
``python -m tern pr`` in a subprocess with verification (``--daemon never``: the sandbox
workers belong to that process and end with it). No test measures wall-clock time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pr_fake_github import FakeGitHub
from typer.testing import CliRunner

from tern.cli import app
from tern.pr.body import BODY_LIMIT, Context, Migrated, body
from tern.pr.git import Git
from tern.pr.github import graphql_url, web_url
from tern.pr.packages import Package, discover, name_packages
from tern.engine.report import FileResult, RunReport, Todo
from tern.verify.report import ModuleRow, PackageReport, to_markdown

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "tf"
TOKEN = "ghs_secretTokenValue0123456789"
REPO = "acme/models"
BRANCH = "tern/migrate-custom_dense"
RAW = "import tensorflow as tf\n\n\ndef f(x):\n    y = tf.raw_ops.Foo(x)\n    return y\n"


def git(cwd: Path, *args: str, who: tuple[str, str] = ("Dev", "dev@example.com")) -> str:
    done = subprocess.run(["git", "-c", f"user.name={who[0]}", "-c", f"user.email={who[1]}", *args], cwd=cwd,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"git {args}: {done.stderr}"
    return done.stdout


@dataclass
class World:
    work: Path
    bare: Path
    api: str
    fake: FakeGitHub
    runner: CliRunner

    def pr(self, *args: str, env: dict | None = None):
        result = self.runner.invoke(app, ["pr", *args], env={**self.env(), **(env or {})}, catch_exceptions=False)
        assert TOKEN not in result.output
        return result

    def env(self) -> dict:
        return {"GITHUB_TOKEN": TOKEN, "GITHUB_REPOSITORY": REPO, "GITHUB_API_URL": self.api, "TERN_PR_RETRY_DELAY": "0",
                "GH_TOKEN": None, "GITHUB_GRAPHQL_URL": None, "GITHUB_STEP_SUMMARY": None}

    def remote_sha(self, branch: str = BRANCH) -> str | None:
        done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], cwd=self.bare,
                              capture_output=True, text=True, check=False)
        return done.stdout.strip() or None

    def local_sha(self, branch: str = BRANCH) -> str | None:
        done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], cwd=self.work,
                              capture_output=True, text=True, check=False)
        return done.stdout.strip() or None

    def edit_source(self, rel: str, text: str, message: str = "edit the TF source") -> None:
        path = self.work / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        git(self.work, "add", "-A")
        git(self.work, "commit", "-qm", message)
        git(self.work, "push", "-q", "origin", "main")


def make_world(tmp_path: Path, packages: dict[str, str], files: dict[str, str] | None = None) -> World:
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    for rel, fixture in packages.items():
        shutil.copytree(FIXTURES / fixture, work / rel, ignore=shutil.ignore_patterns("__pycache__"))
    for rel, text in (files or {}).items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    git(work, "add", "-A")
    git(work, "commit", "-qm", "TF models")
    git(work, "remote", "add", "origin", str(bare))
    git(work, "push", "-q", "origin", "main")
    fake = FakeGitHub(token=TOKEN, repo=REPO, bare=bare)
    return World(work, bare, fake.start(), fake, CliRunner())


@pytest.fixture
def world(tmp_path, monkeypatch):
    w = make_world(tmp_path, {"models/custom_dense": "custom_dense"})
    monkeypatch.chdir(w.work)
    yield w
    w.fake.stop()
    assert w.fake.violations == []


def trailers(cwd: Path, ref: str) -> list[tuple[str, str]]:
    out = git(cwd, "log", "-1", "--format=%(trailers:only,unfold)", ref)
    return [tuple(part.strip() for part in line.split(":", 1)) for line in out.splitlines() if ":" in line]


def writes(fake: FakeGitHub) -> list[str]:
    return [f"{r.method} {r.path}" for r in fake.requests if r.method != "GET"]


# ---------------------------------------------------------------------------- opening


def test_opens_a_pull_request_for_a_package(world):
    result = world.pr("models/custom_dense", "--no-verify")
    assert result.exit_code == 0, result.output
    head = world.remote_sha()
    assert head and head == world.local_sha()
    assert git(world.bare, "rev-parse", f"{head}^") == git(world.bare, "rev-parse", "main")
    tree = git(world.bare, "ls-tree", "-r", "--name-only", head).split()
    out = "models/custom_dense_jax/custom_dense"
    assert {f"{out}/__init__.py", f"{out}/layers.py", f"{out}/layers_test.py", f"{out}/_keras_compat.py",
            f"{out}.tern-report.json", f"{out}.tern-report.md"} <= set(tree)
    assert not [p for p in tree if p.startswith(".tern") or "/.tern" in p or "__pycache__" in p]
    assert len(tree) == 3 + 6  # the TF sources, the translation with its support module and its two reports: nothing else
    layers = git(world.bare, "show", f"{head}:{out}/layers.py")
    assert "flax" in layers and "tensorflow" not in layers
    report = json.loads(git(world.bare, "show", f"{head}:{out}.tern-report.json"))
    assert (report["source"], report["out"]) == ("models/custom_dense", out)  # no absolute paths of the runner
    source_tree = git(world.work, "rev-parse", "HEAD:models/custom_dense").strip()
    assert trailers(world.bare, head) == [("Tern-Package", "models/custom_dense"), ("Tern-Source", source_tree),
                                          ("Tern-Version", trailers(world.bare, head)[2][1])]
    assert git(world.bare, "log", "-1", "--format=%an <%ae>|%cn <%ce>", head).strip() == \
        "tern-bot <tern-bot@users.noreply.github.com>|tern-bot <tern-bot@users.noreply.github.com>"
    assert git(world.work, "status", "--porcelain", "--untracked-files=no") == ""  # the checkout is untouched
    (pull,) = world.fake.pulls.values()
    assert pull["title"] == "tern: migrate models/custom_dense to JAX/Flax"
    assert pull["head"]["ref"] == BRANCH and pull["base"]["ref"] == "main"
    assert pull["draft"] is True  # not verified
    assert [label["name"] for label in pull["labels"]] == ["tern", "migration"]
    body = pull["body"]
    assert "not verified: skipped (--no-verify)" in body
    assert "31 edits: 31 by deterministic rules (100%), 0 by the LLM (0%)" in body
    assert "tern migrate models/custom_dense --out models/custom_dense_jax/custom_dense" in body
    assert "tern verify models/custom_dense_jax/custom_dense --original models/custom_dense" in body
    assert f"<!-- tern-pr head={head} -->" in body
    assert f"{world.fake.root}/{REPO}/blob/{BRANCH}/{out})" in body  # GHES: web server derived from /api/v3
    assert [f"{r.method} {r.path}" for r in world.fake.requests] == [
        f"GET /repos/{REPO}/pulls", f"POST /repos/{REPO}/pulls", f"POST /repos/{REPO}/issues/1/labels"]
    assert world.fake.requests[0].query == {"head": f"acme:{BRANCH}", "state": "open", "per_page": "10"}
    assert f"{BRANCH}: opened #1 (draft) {world.fake.root}/{REPO}/pull/1" in result.stdout


def test_todos_link_to_their_lines_and_custom_labels(world):
    world.edit_source("models/custom_dense/raw.py", RAW)
    result = world.pr("models/custom_dense", "--no-verify", "--label", "jax", "--label", "team-ml")
    assert result.exit_code == 0, result.output
    (pull,) = world.fake.pulls.values()
    assert [label["name"] for label in pull["labels"]] == ["jax", "team-ml"]
    prefix = f"{world.fake.root}/{REPO}/blob/{BRANCH}/models/custom_dense_jax/custom_dense/raw.py#L"
    lines = [int(part.split(")", 1)[0]) for part in pull["body"].split(prefix)[1:]]
    committed = git(world.bare, "show", f"{BRANCH}:models/custom_dense_jax/custom_dense/raw.py").splitlines()
    assert [committed[n - 1].strip() for n in lines] == ["import tensorflow as tf", "y = tf.raw_ops.Foo(x)"]
    assert all("TODO(tern)" in committed[n - 2] for n in lines)
    assert "2 TODO(s) left" in pull["body"] and pull["draft"] is True


# ---------------------------------------------------------------------------- reruns


def test_rerun_with_nothing_changed_does_nothing(world, tmp_path):
    assert world.pr("models/custom_dense", "--no-verify").exit_code == 0
    head, before = world.remote_sha(), len(world.fake.requests)
    summary = tmp_path / "step-summary.md"
    result = world.pr("models/custom_dense", "--no-verify", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.exit_code == 0, result.output
    assert f"| `{BRANCH}` | [up to date: #1]({world.fake.root}/{REPO}/pull/1) |" in summary.read_text()
    assert world.remote_sha() == head == world.local_sha()
    assert len(world.fake.pulls) == 1 and world.fake.comments == []
    assert [f"{r.method} {r.path}" for r in world.fake.requests[before:]] == [f"GET /repos/{REPO}/pulls"]
    assert "up to date: #1" in result.stdout


def test_rerun_after_a_source_edit_adds_one_commit_and_updates_the_pull_request(world):
    assert world.pr("models/custom_dense", "--no-verify").exit_code == 0
    old = world.remote_sha()
    world.edit_source("models/custom_dense/raw.py", RAW)
    before = len(world.fake.requests)
    result = world.pr("models/custom_dense", "--no-verify")
    assert result.exit_code == 0, result.output
    new = world.remote_sha()
    assert new != old and git(world.bare, "rev-list", "--count", f"{old}..{new}").strip() == "1"
    assert git(world.bare, "rev-parse", f"{new}^").strip() == old  # on top: a fast-forward
    assert dict(trailers(world.bare, new))["Tern-Source"] == git(world.work, "rev-parse", "HEAD:models/custom_dense").strip()
    assert git(world.bare, "log", "-1", "--format=%s", new).startswith("tern: update the migration of models/custom_dense")
    assert list(world.fake.pulls) == [1]
    assert f"<!-- tern-pr head={new} -->" in world.fake.pulls[1]["body"]
    assert writes(world.fake)[-2:] == [f"PATCH /repos/{REPO}/pulls/1", f"POST /repos/{REPO}/issues/1/comments"]
    assert len(world.fake.requests) - before == 3  # GET, PATCH, comment: labels are there already
    assert world.fake.comments[0][0] == 1 and new[:12] in world.fake.comments[0][1]
    assert "updated #1" in result.stdout


def test_a_human_commit_on_the_branch_stops_the_bot(world, tmp_path):
    assert world.pr("models/custom_dense", "--no-verify").exit_code == 0
    other = tmp_path / "human"
    git(tmp_path, "clone", "-q", "-b", BRANCH, str(world.bare), str(other))
    (other / "models/custom_dense_jax/custom_dense/layers.py").write_text("# fixed by hand\n")
    git(other, "commit", "-qam", "Fix the layer by hand", who=("Jane Doe", "jane@example.com"))
    git(other, "push", "-q", "origin", BRANCH)
    human = git(other, "rev-parse", "HEAD").strip()
    world.edit_source("models/custom_dense/raw.py", RAW)
    before = len(world.fake.requests)
    result = world.pr("models/custom_dense", "--no-verify")
    assert result.exit_code == 1
    assert human[:12] in result.stderr and "not made by tern" in result.stderr and "Jane Doe" in result.stderr
    assert world.remote_sha() == human  # untouched
    assert len(world.fake.requests) == before  # no API call at all
    rebased = world.pr("models/custom_dense", "--no-verify", "--rebase")  # --rebase does not override it either
    assert rebased.exit_code == 1 and world.remote_sha() == human


def test_update_branch_merges_are_not_a_person_s_work(world, tmp_path):
    """GitHub's "Update branch" merges the base into the bot's branch: nothing of a person's."""
    assert world.pr("models/custom_dense", "--no-verify").exit_code == 0
    world.edit_source("docs/README.md", "unrelated\n", "docs")
    other = tmp_path / "button"
    git(tmp_path, "clone", "-q", "-b", BRANCH, str(world.bare), str(other))
    git(other, "merge", "-q", "--no-edit", "origin/main", who=("GitHub", "noreply@github.com"))
    git(other, "push", "-q", "origin", BRANCH)
    merged = world.remote_sha()
    world.edit_source("models/custom_dense/raw.py", RAW)
    result = world.pr("models/custom_dense", "--no-verify")
    assert result.exit_code == 0, result.output
    assert git(world.bare, "rev-parse", f"{world.remote_sha()}^").strip() == merged


def test_rebase_replaces_a_bot_only_branch_with_lease(world):
    assert world.pr("models/custom_dense", "--no-verify").exit_code == 0
    old = world.remote_sha()
    world.edit_source("docs/README.md", "unrelated\n", "docs")
    main = git(world.bare, "rev-parse", "main").strip()
    result = world.pr("models/custom_dense", "--no-verify", "--rebase")
    assert result.exit_code == 0, result.output
    new = world.remote_sha()
    assert new != old and git(world.bare, "rev-parse", f"{new}^").strip() == main
    assert "--force-with-lease" in result.stderr and list(world.fake.pulls) == [1]


def test_a_pull_request_closed_for_the_same_commit_is_not_reopened(world):
    assert world.pr("models/custom_dense", "--no-verify").exit_code == 0
    world.fake.pulls[1]["state"] = "closed"
    result = world.pr("models/custom_dense", "--no-verify")
    assert result.exit_code == 0, result.output
    assert "not reopened: #1" in result.stdout and len(world.fake.pulls) == 1
    assert world.fake.calls("GET")[-1].query["state"] == "closed" and writes(world.fake)[-1].endswith("labels")


# ---------------------------------------------------------------------------- failures


def test_bad_token_401_keeps_the_branch_and_commit(world):
    world.fake.fail("GET", r"/repos/.*/pulls", 401, body={"message": "Bad credentials"})
    result = world.pr("models/custom_dense", "--no-verify")
    assert result.exit_code == 1
    assert "GitHub rejected the token (HTTP 401 Bad credentials" in result.stderr
    assert world.local_sha() and world.remote_sha() == world.local_sha()
    assert world.fake.pulls == {}
    assert world.pr("models/custom_dense", "--no-verify").exit_code == 0  # the rerun opens it, same commit
    assert world.fake.pulls[1]["head"]["sha"] == world.local_sha()


def test_no_permission_403(world):
    world.fake.fail("POST", r"/repos/.*/pulls", 403, body={"message": "Resource not accessible by integration"})
    result = world.pr("models/custom_dense", "--no-verify")
    assert result.exit_code == 1
    assert "no permission for POST" in result.stderr and "pull-requests: write" in result.stderr
    assert "Resource not accessible by integration" in result.stderr
    assert world.local_sha() == world.remote_sha()


@pytest.mark.parametrize("status, headers", [
    (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "0"}),
    (429, {"retry-after": "1"}),
    (403, {"retry-after": "0"}),  # a secondary rate limit
])
def test_rate_limit_is_waited_out_when_short(world, status, headers):
    world.fake.fail("POST", r"/repos/.*/pulls", status, headers=headers, body={"message": "API rate limit exceeded"})
    result = world.pr("models/custom_dense", "--no-verify")
    assert result.exit_code == 0, result.output
    assert len(world.fake.calls("POST", r"/repos/.*/pulls")) == 2 and list(world.fake.pulls) == [1]


def test_rate_limit_exhausted_stops_with_the_reset_time(world):
    reset = int(time.time()) + 3600
    world.fake.fail("GET", r"/repos/.*/pulls", 403, headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)},
                    body={"message": "API rate limit exceeded for installation"})
    result = world.pr("models/custom_dense", "--no-verify")
    assert result.exit_code == 1
    when = datetime.fromtimestamp(reset, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert f"rate limit reached (GET /repos/{REPO}/pulls, HTTP 403); it resets at {when}" in result.stderr
    assert len(world.fake.calls("GET")) == 1 and world.local_sha() == world.remote_sha()


def test_422_already_exists_updates_the_existing_pull_request(world):
    world.fake.seed_pull(BRANCH, draft=False, body="opened by an earlier run")
    world.fake.fail("GET", r"/repos/.*/pulls", 200, body=[])  # the race: it appears between our GET and POST
    result = world.pr("models/custom_dense", "--no-verify")
    assert result.exit_code == 0, result.output
    assert list(world.fake.pulls) == [1] and "updated #1 (it existed already)" in result.stdout
    pull = world.fake.pulls[1]
    assert f"<!-- tern-pr head={world.remote_sha()} -->" in pull["body"]
    assert pull["draft"] is True  # unverified now: turned into a draft over GraphQL
    assert world.fake.calls("POST", "/api/graphql")[0].json["variables"] == {"id": "PR_node1"}


def test_422_validation_errors_are_reported(world):
    world.fake.fail("POST", r"/repos/.*/pulls", 422, body={"message": "Validation Failed", "errors": [
        {"resource": "PullRequest", "field": "base", "code": "invalid"}]})
    result = world.pr("models/custom_dense", "--no-verify")
    assert result.exit_code == 1
    assert f"GitHub refused POST /repos/{REPO}/pulls (HTTP 422 Validation Failed): PullRequest base invalid" in result.stderr
    assert world.local_sha() == world.remote_sha()


def test_server_errors_are_retried_then_reported(world):
    world.fake.fail("POST", r"/repos/.*/pulls", 502, body={"message": "Server Error"})
    assert world.pr("models/custom_dense", "--no-verify").exit_code == 0
    assert len(world.fake.calls("POST", r"/repos/.*/pulls")) == 2 and list(world.fake.pulls) == [1]
    world.edit_source("models/custom_dense/raw.py", RAW)
    world.fake.fail("PATCH", r"/repos/.*/pulls/1", 503, body={"message": "Unavailable"}, times=4)
    result = world.pr("models/custom_dense", "--no-verify")
    assert result.exit_code == 1
    assert "GitHub API server error (PATCH /repos/acme/models/pulls/1): HTTP 503 Unavailable (after 4 attempts)" in result.stderr
    assert world.local_sha() == world.remote_sha()
    assert world.pr("models/custom_dense", "--no-verify").exit_code == 0  # the stale body is refreshed, no new commit
    assert f"head={world.remote_sha()}" in world.fake.pulls[1]["body"]


def test_api_unreachable_keeps_the_local_branch_and_commit(world):
    world.fake.stop()
    result = world.pr("models/custom_dense", "--no-verify")
    world.fake.start()  # for the fixture's teardown
    assert result.exit_code == 1
    assert "cannot reach the GitHub API at" in result.stderr and "after 4 attempts" in result.stderr
    head = world.local_sha()
    assert head and "Tern-Package: models/custom_dense" in git(world.work, "log", "-1", "--format=%B", head)


def test_a_rejected_push_keeps_the_local_commit_and_a_rerun_pushes_it(world):
    hook = world.bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'protected: no pushes today' >&2\nexit 1\n")
    hook.chmod(0o755)
    result = world.pr("models/custom_dense", "--no-verify")
    assert result.exit_code == 1
    assert "push to origin failed" in result.stderr and f"kept on the local branch {BRANCH}" in result.stderr
    kept = world.local_sha()
    assert kept and world.remote_sha() is None and world.fake.requests == []
    hook.unlink()
    result = world.pr("models/custom_dense", "--no-verify")
    assert result.exit_code == 0, result.output
    assert world.remote_sha() == kept  # the same commit, not a new one


def test_dry_run_pushes_nothing_and_calls_no_api(world):
    env = {"GITHUB_TOKEN": None}  # no token needed
    result = world.pr("models/custom_dense", "--no-verify", "--dry-run", env=env)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"branch: {BRANCH}" in out and "push: fast-forward" in out
    assert "Tern-Package: models/custom_dense" in out and "tern: migrate models/custom_dense to JAX/Flax" in out
    assert "models/custom_dense_jax/custom_dense/layers.py" in out and "6 files changed" in out
    assert "## Reproduce locally" in out and "[draft]" in out
    assert world.fake.requests == [] and world.remote_sha() is None and world.local_sha() is None
    assert not (world.work / "models" / "custom_dense_jax").exists()


def test_usage_errors_exit_2(world):
    assert world.pr("models/nope", "--no-verify").exit_code == 2
    missing = world.pr("models/custom_dense", "--no-verify", env={"GITHUB_TOKEN": None})
    assert missing.exit_code == 2 and "no token" in missing.stderr
    assert world.pr("models/custom_dense", "--remote", "upstream", "--no-verify").exit_code == 2
    assert world.fake.requests == [] and world.remote_sha() is None


# ---------------------------------------------------------------------------- groups and selection


def test_group_opens_one_pull_request_for_several_packages(tmp_path, monkeypatch):
    w = make_world(tmp_path, {"models/custom_dense": "custom_dense", "models/mlp_sequential": "mlp_sequential"})
    monkeypatch.chdir(w.work)
    try:
        result = w.pr("models/custom_dense", "models/mlp_sequential", "--group", "keras-models", "--no-verify")
        assert result.exit_code == 0, result.output
        head = w.remote_sha("tern/migrate-keras-models")
        assert head and w.remote_sha() is None
        assert [v for k, v in trailers(w.bare, head) if k == "Tern-Package"] == ["models/custom_dense", "models/mlp_sequential"]
        tree = git(w.bare, "ls-tree", "-r", "--name-only", head)
        assert "models/mlp_sequential_jax/mlp_sequential/model.py" in tree and "models/custom_dense_jax/custom_dense/layers.py" in tree
        (pull,) = w.fake.pulls.values()
        assert pull["title"] == "tern: migrate 2 packages to JAX/Flax (keras-models: custom_dense, mlp_sequential)"
        assert "## `models/custom_dense`" in pull["body"] and "## `models/mlp_sequential`" in pull["body"]
    finally:
        w.fake.stop()
    assert w.fake.violations == []


def test_without_paths_only_packages_changed_since_their_last_migration(tmp_path, monkeypatch):
    config = '[tool.tern.pr]\npackages = ["models/*"]\n'
    w = make_world(tmp_path, {"models/custom_dense": "custom_dense", "models/mlp_sequential": "mlp_sequential"},
                   {"pyproject.toml": config})
    monkeypatch.chdir(w.work)
    mlp = "tern/migrate-mlp_sequential"
    try:
        first = w.pr("--no-verify")
        assert first.exit_code == 0, first.output
        assert sorted(p["head"]["ref"] for p in w.fake.pulls.values()) == [BRANCH, mlp]
        # custom_dense is merged (fast-forward of main); mlp_sequential's PR stays open
        git(w.bare, "update-ref", "refs/heads/main", w.remote_sha())
        w.fake.pulls[1]["state"], w.fake.pulls[1]["merged_at"] = "closed", "2024-01-01T00:00:00Z"
        git(w.work, "pull", "-q", "--ff-only", "origin", "main")
        before = len(w.fake.requests)
        second = w.pr("--no-verify")
        assert second.exit_code == 0, second.output
        assert "custom_dense: sources unchanged since the last migration; skipped" in second.stderr
        assert [r.query["head"] for r in w.fake.requests[before:]] == [f"acme:{mlp}"]  # mlp: its open PR checked
        w.edit_source("models/custom_dense/raw.py", RAW)
        third = w.pr("--no-verify")
        assert third.exit_code == 0, third.output
        assert "models/custom_dense changed since" in third.stderr
        assert git(w.bare, "rev-parse", f"{w.remote_sha()}^").strip() == git(w.bare, "rev-parse", "main").strip()
        assert sorted(w.fake.pulls) == [1, 2, 3] and w.fake.pulls[3]["head"]["ref"] == BRANCH
        assert f"{mlp}: up to date: #2" in third.stdout
    finally:
        w.fake.stop()
    assert w.fake.violations == []


def test_discover_finds_top_level_tf_packages_only(tmp_path):
    repo = tmp_path / "repo"
    files = {
        "a/__init__.py": "", "a/model.py": "import tensorflow as tf\n",
        "plain/__init__.py": "", "plain/util.py": "import numpy\n",
        "lib/__init__.py": "", "lib/sub/__init__.py": "", "lib/sub/layers.py": "from keras import layers\n",
        "a_jax/a/__init__.py": "", "a_jax/a/model.py": "import tensorflow as tf  # residue\n",
        "a_jax/a.tern-report.json": "{}", "scripts/train.py": "import tensorflow\n",
    }
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(tmp_path, "init", "-q", str(repo))
    assert discover(Git(repo)) == ["a", "lib"]
    named = name_packages(["x/utils", "y/utils", "a"], None)
    assert [(p.name, p.out_rel) for p in named] == [("x-utils", "x/utils_jax/utils"), ("y-utils", "y/utils_jax/utils"),
                                                     ("a", "a_jax/a")]


def test_body_stays_under_githubs_limit():
    todos = [Todo("tf.raw_ops.Foo", "no rule translates this symbol yet; " * 3, line) for line in range(40)]
    files = [FileResult(f"m{i}.py", "residue", todos=todos) for i in range(100)]
    item = Migrated(Package("models/big", "big", "models/big_jax/big"), RunReport("models/big", "models/big_jax/big", files),
                    "0" * 40, verify_note="skipped (--no-verify)")
    text = body([item], Context(server="https://github.com", repo=REPO, branch="tern/migrate-big", base="main",
                                remote="origin", head="a" * 40, version="0"))
    assert len(text) <= BODY_LIMIT < 40 * 100 * 150
    assert "**Truncated**" in text and "## Reproduce locally" in text
    assert text.rstrip().endswith(f"<!-- tern-pr head={'a' * 40} -->")


def test_verification_markdown_rows_and_problems():
    problems = ["mismatch: pkg.a:Gate case 0: out | x <y>"] + [f"error: case {i}" for i in range(25)]
    rows = [ModuleRow("pkg", status="untested"),
            ModuleRow("pkg.a", tests_passed=2, tests_total=3, cases_matched=1, cases_total=2, max_abs=1.5e-3, max_rel=2e-2,
                      status="mismatch", problems=problems)]
    text = to_markdown([PackageReport("pkg", "o", "t", rows)])
    assert "0 equivalent, 1 mismatch, 1 untested, 0 error modules." in text
    assert "| `pkg.a` | mismatch | 2/3 | 1/2 | 1.5e-03 | 2.0e-02 |" in text and "| `pkg` | untested | - | - | - | - |" in text
    assert "- pkg.a: mismatch: pkg.a:Gate case 0: out \\| x &lt;y&gt;" in text and "- ... and 6 more" in text


def test_web_and_graphql_urls_for_github_and_enterprise():
    assert web_url("https://api.github.com") == "https://github.com"
    assert web_url("https://ghe.example.com/api/v3") == "https://ghe.example.com"
    assert graphql_url("https://api.github.com") == "https://api.github.com/graphql"
    assert graphql_url("https://ghe.example.com/api/v3/") == "https://ghe.example.com/api/graphql"


# ---------------------------------------------------------------------------- with verification


def test_verified_pull_request_end_to_end(world):
    """The real path: the sandbox records the TF tests, replays them on the Flax module and
    runs the translated tests (workers of this subprocess only: --daemon never)."""
    env = {**os.environ, **{k: v for k, v in world.env().items() if v is not None}}
    for key in ("GH_TOKEN", "GITHUB_GRAPHQL_URL", "GITHUB_STEP_SUMMARY"):
        env.pop(key, None)
    done = subprocess.run([sys.executable, "-m", "tern", "pr", "models/custom_dense", "--base", "main", "--daemon", "never"],
                          cwd=world.work, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert TOKEN not in done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    head = world.remote_sha()
    out = "models/custom_dense_jax/custom_dense"
    verify_md = git(world.bare, "show", f"{head}:{out}.tern-verify.md")
    assert "`custom_dense.layers` | equivalent |" in verify_md
    report = json.loads(git(world.bare, "show", f"{head}:{out}.tern-verify.json"))
    assert report["packages"][0]["status"] == "equivalent"
    assert report["packages"][0]["original"] == "models/custom_dense"
    assert not [p for p in git(world.bare, "ls-tree", "-r", "--name-only", head).split() if ".tern/" in p]
    (pull,) = world.fake.pulls.values()
    assert pull["draft"] is False, pull["body"]
    assert "**Ready for review**" in pull["body"] and "| `custom_dense.layers` | equivalent |" in pull["body"]
