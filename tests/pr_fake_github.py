"""A loopback stand-in for the GitHub REST API (and the one GraphQL mutation tern uses).

It checks every request the way GitHub would refuse it (token, media type, API version,
user agent, JSON body fields and types, query parameters) and records a violation for
anything off; it keeps pull requests, labels and comments, answers with GitHub's shapes
and status codes (422 for a second PR from one branch or a head branch that does not
exist on the remote), and plays scripted failures first. Served under ``/api/v3`` like
GitHub Enterprise Server, so links and the GraphQL address are derived as there.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

PREFIX = "/api/v3"
PULL_FIELDS = {"title": str, "head": str, "base": str, "body": str, "draft": bool}
PATCH_FIELDS = {"title": str, "body": str, "state": str, "base": str}


@dataclass
class Scripted:
    method: str
    path: re.Pattern
    status: int
    headers: dict[str, str]
    body: object
    times: int


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    json: object


@dataclass
class FakeGitHub:
    token: str
    repo: str  # owner/name
    bare: Path  # the remote: a pull request's head branch must exist there
    pulls: dict[int, dict] = field(default_factory=dict)
    comments: list[tuple[int, str]] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    script: list[Scripted] = field(default_factory=list)

    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                fake._handle(self, "GET")

            def do_POST(self):
                fake._handle(self, "POST")

            def do_PATCH(self):
                fake._handle(self, "PATCH")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.root = f"http://127.0.0.1:{self.server.server_address[1]}"
        return self.root + PREFIX

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def fail(self, method: str, path: str, status: int, *, headers: dict | None = None, body: object = None,
             times: int = 1) -> None:
        """The next ``times`` requests matching answer ``status`` (path: a regex on the REST path)."""
        self.script.append(Scripted(method, re.compile(path), status, headers or {},
                                    body if body is not None else {"message": "scripted"}, times))

    def seed_pull(self, branch: str, *, base: str = "main", draft: bool = False, body: str = "") -> dict:
        return self._new_pull({"title": "seeded", "head": branch, "base": base, "body": body, "draft": draft})

    def calls(self, method: str | None = None, path: str | None = None) -> list[Request]:
        return [r for r in self.requests if (method is None or r.method == method)
                and (path is None or re.fullmatch(path, r.path))]

    # ------------------------------------------------------------------ serving

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(handler.path)
        path = url.path.removeprefix(PREFIX)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        problems = self._check_headers(handler, method, raw)
        payload = None
        if raw:
            try:
                payload = json.loads(raw)
            except ValueError:
                problems.append(f"{method} {path}: body is not JSON")
        self.requests.append(Request(method, path, query, dict(handler.headers), payload))
        self.violations.extend(problems)
        for scripted in self.script:
            if scripted.times > 0 and scripted.method == method and scripted.path.fullmatch(path):
                scripted.times -= 1
                return self._send(handler, scripted.status, scripted.body, scripted.headers)
        if problems:
            return self._send(handler, 400, {"message": "; ".join(problems)})
        status, answer = self._route(method, path, query, payload)
        self._send(handler, status, answer)

    def _check_headers(self, handler, method: str, raw: bytes) -> list[str]:
        h = handler.headers
        expected = {"Authorization": f"Bearer {self.token}", "Accept": "application/vnd.github+json",
                    "X-GitHub-Api-Version": "2022-11-28"}
        problems = [f"{method} {handler.path}: header {k} is {h.get(k)!r}" for k, v in expected.items() if h.get(k) != v]
        if not (h.get("User-Agent") or "").startswith("tern/"):
            problems.append(f"{method} {handler.path}: User-Agent {h.get('User-Agent')!r}")
        if method in ("POST", "PATCH") and not (h.get("Content-Type") or "").startswith("application/json"):
            problems.append(f"{method} {handler.path}: Content-Type {h.get('Content-Type')!r}")
        if method == "GET" and raw:
            problems.append(f"GET {handler.path}: has a body")
        return problems

    def _route(self, method: str, path: str, query: dict, body) -> tuple[int, object]:
        repo = f"/repos/{self.repo}"
        if path == "/api/graphql" and method == "POST":
            return self._graphql(body)
        if path == f"{repo}/pulls" and method == "GET":
            return self._list(query)
        if path == f"{repo}/pulls" and method == "POST":
            return self._create(body)
        if method == "PATCH" and (m := re.fullmatch(rf"{re.escape(repo)}/pulls/(\d+)", path)):
            return self._patch(int(m[1]), body)
        if method == "POST" and (m := re.fullmatch(rf"{re.escape(repo)}/issues/(\d+)/labels", path)):
            return self._labels(int(m[1]), body)
        if method == "POST" and (m := re.fullmatch(rf"{re.escape(repo)}/issues/(\d+)/comments", path)):
            return self._comment(int(m[1]), body)
        self.violations.append(f"unexpected request {method} {path}")
        return 404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}

    def _list(self, query: dict) -> tuple[int, object]:
        owner = self.repo.split("/")[0]
        head, state = query.get("head", ""), query.get("state", "open")
        if not head.startswith(owner + ":") or state not in ("open", "closed", "all"):
            self.violations.append(f"GET pulls with head={head!r} state={state!r}")
            return 422, {"message": "Validation Failed"}
        branch = head.split(":", 1)[1]
        return 200, [p for p in self.pulls.values() if p["head"]["ref"] == branch and state in ("all", p["state"])]

    def _create(self, body) -> tuple[int, object]:
        if not self._fields(body, PULL_FIELDS, required=("title", "head", "base"), where="POST pulls"):
            return 400, {"message": "Problems parsing JSON"}
        if not self._branch_exists(body["head"]) or not self._branch_exists(body["base"]):
            return 422, {"message": "Validation Failed", "errors": [
                {"resource": "PullRequest", "field": "head", "code": "invalid"}]}
        owner = self.repo.split("/")[0]
        if any(p["head"]["ref"] == body["head"] and p["state"] == "open" for p in self.pulls.values()):
            return 422, {"message": "Validation Failed", "errors": [
                {"resource": "PullRequest", "code": "custom",
                 "message": f"A pull request already exists for {owner}:{body['head']}."}]}
        return 201, self._new_pull(body)

    def _new_pull(self, body: dict) -> dict:
        number = max(self.pulls, default=0) + 1
        owner = self.repo.split("/")[0]
        pull = {"number": number, "node_id": f"PR_node{number}", "state": "open", "draft": bool(body.get("draft")),
                "title": body["title"], "body": body.get("body") or "", "merged_at": None,
                "html_url": f"{self.root}/{self.repo}/pull/{number}", "user": {"login": "tern-bot"},
                "head": {"ref": body["head"], "label": f"{owner}:{body['head']}", "sha": self._sha(body["head"])},
                "base": {"ref": body["base"]}, "labels": []}
        self.pulls[number] = pull
        return pull

    def _patch(self, number: int, body) -> tuple[int, object]:
        if number not in self.pulls:
            return 404, {"message": "Not Found"}
        if not self._fields(body, PATCH_FIELDS, required=(), where="PATCH pulls") or not body:
            return 422, {"message": "Validation Failed"}
        self.pulls[number].update(body)
        return 200, self.pulls[number]

    def _labels(self, number: int, body) -> tuple[int, object]:
        if number not in self.pulls:
            return 404, {"message": "Not Found"}
        if not (isinstance(body, dict) and set(body) == {"labels"} and isinstance(body["labels"], list)
                and all(isinstance(x, str) and x for x in body["labels"])):
            self.violations.append(f"POST labels body {body!r}")
            return 422, {"message": "Validation Failed"}
        have = self.pulls[number]["labels"]
        for name in body["labels"]:
            if name not in [label["name"] for label in have]:
                have.append({"name": name, "color": "ededed"})
        return 200, have

    def _comment(self, number: int, body) -> tuple[int, object]:
        if number not in self.pulls:
            return 404, {"message": "Not Found"}
        if not (isinstance(body, dict) and set(body) == {"body"} and isinstance(body["body"], str) and body["body"]):
            self.violations.append(f"POST comments body {body!r}")
            return 422, {"message": "Validation Failed"}
        self.comments.append((number, body["body"]))
        return 201, {"id": len(self.comments), "body": body["body"]}

    def _graphql(self, body) -> tuple[int, object]:
        if not (isinstance(body, dict) and isinstance(body.get("query"), str) and isinstance(body.get("variables"), dict)):
            self.violations.append(f"graphql body {body!r}")
            return 400, {"message": "Problems parsing JSON"}
        node = body["variables"].get("id")
        pull = next((p for p in self.pulls.values() if p["node_id"] == node), None)
        if pull is None:
            return 200, {"errors": [{"message": f"Could not resolve to a node with the global id of '{node}'"}]}
        if "convertPullRequestToDraft" in body["query"]:
            pull["draft"] = True
        elif "markPullRequestReadyForReview" in body["query"]:
            pull["draft"] = False
        else:
            self.violations.append(f"graphql query {body['query']!r}")
        return 200, {"data": {"pullRequest": {"isDraft": pull["draft"]}}}

    def _fields(self, body, schema: dict, *, required: tuple, where: str) -> bool:
        if not isinstance(body, dict):
            self.violations.append(f"{where}: body {body!r}")
            return False
        bad = [k for k in body if k not in schema or not isinstance(body[k], schema[k])]
        missing = [k for k in required if k not in body]
        if bad or missing:
            self.violations.append(f"{where}: bad fields {bad}, missing {missing}")
            return False
        return True

    def _branch_exists(self, branch: str) -> bool:
        return self._sha(branch) != ""

    def _sha(self, branch: str) -> str:
        done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], cwd=self.bare,
                              capture_output=True, text=True, check=False)
        return done.stdout.strip()

    @staticmethod
    def _send(handler, status: int, body: object, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json; charset=utf-8")
        handler.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)
