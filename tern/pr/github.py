"""The few GitHub REST (and one GraphQL) calls ``tern pr`` makes, with GitHub's failure modes
turned into one-line messages.

Retries are bounded: server errors and network errors are retried ``retries`` times with
doubling delays; a rate limit is waited out only when GitHub says it ends within
``max_wait`` seconds (``retry-after``, or ``x-ratelimit-reset`` with no requests left),
otherwise the run stops and names the reset time. The token goes in one header and is
never part of a message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx2

API_VERSION = "2022-11-28"
DEFAULT_API = "https://api.github.com"


class ApiError(RuntimeError):
    """A call failed for good. ``fatal``: no later call can succeed either (bad token,
    no permission, rate limit exhausted), so the run stops instead of trying the next package."""

    def __init__(self, message: str, *, status: int | None = None, fatal: bool = False, body: Any = None):
        super().__init__(message)
        self.status = status
        self.fatal = fatal
        self.body = body


@dataclass
class Settings:
    api_url: str
    repo: str  # owner/name
    token: str = field(repr=False)
    version: str = "0"
    retries: int = 3
    retry_delay: float = 2.0
    max_wait: float = 60.0
    timeout: float = 30.0
    graphql_url: str | None = None


def web_url(api_url: str) -> str:
    """The web server behind an API root: api.github.com -> github.com; GitHub Enterprise
    Server https://HOST/api/v3 -> https://HOST."""
    parts = urlsplit(api_url.rstrip("/"))
    host, path = parts.netloc, parts.path
    if host == "api.github.com":
        host = "github.com"
    elif host.startswith("api.") and not path:  # GHE.com data residency: api.SUB.ghe.com
        host = host[4:]
    path = path.removesuffix("/api/v3")
    return f"{parts.scheme}://{host}{path}"


def graphql_url(api_url: str) -> str:
    root = api_url.rstrip("/")
    return root[: -len("/v3")] + "/graphql" if root.endswith("/api/v3") else root + "/graphql"


class GitHub:
    def __init__(self, settings: Settings, *, sleep: Callable[[float], None] = time.sleep,
                 transport: httpx2.BaseTransport | None = None):
        self.settings = settings
        self.owner, _, self.name = settings.repo.partition("/")
        self.sleep = sleep
        self.calls = 0
        self.client = httpx2.Client(
            base_url=settings.api_url.rstrip("/"), timeout=settings.timeout, transport=transport,
            headers={"Authorization": f"Bearer {settings.token}", "Accept": "application/vnd.github+json",
                     "X-GitHub-Api-Version": API_VERSION, "User-Agent": f"tern/{settings.version}"})

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------------ pull requests

    def find_pull(self, branch: str) -> dict | None:
        """The open pull request from ``branch`` of this repository, if any."""
        found = self.request("GET", f"/repos/{self.settings.repo}/pulls",
                             params={"head": f"{self.owner}:{branch}", "state": "open", "per_page": "10"})
        return found[0] if found else None

    def create_pull(self, *, title: str, head: str, base: str, body: str, draft: bool) -> dict:
        return self.request("POST", f"/repos/{self.settings.repo}/pulls",
                            json={"title": title, "head": head, "base": base, "body": body, "draft": draft})

    def update_pull(self, number: int, *, title: str, body: str) -> dict:
        return self.request("PATCH", f"/repos/{self.settings.repo}/pulls/{number}", json={"title": title, "body": body})

    def add_labels(self, number: int, labels: list[str]) -> None:
        self.request("POST", f"/repos/{self.settings.repo}/issues/{number}/labels", json={"labels": labels})

    def comment(self, number: int, body: str) -> None:
        self.request("POST", f"/repos/{self.settings.repo}/issues/{number}/comments", json={"body": body})

    def set_draft(self, node_id: str, draft: bool) -> None:
        """REST cannot change the draft flag of an existing pull request; GraphQL can."""
        name = "convertPullRequestToDraft" if draft else "markPullRequestReadyForReview"
        query = f"mutation($id: ID!) {{ {name}(input: {{pullRequestId: $id}}) {{ pullRequest {{ isDraft }} }} }}"
        answer = self.request("POST", self.settings.graphql_url or graphql_url(self.settings.api_url),
                              json={"query": query, "variables": {"id": node_id}})
        if isinstance(answer, dict) and answer.get("errors"):
            raise ApiError(f"GitHub GraphQL {name}: {answer['errors'][0].get('message', answer['errors'])}")

    # ------------------------------------------------------------------ transport

    def request(self, method: str, url: str, *, params: dict | None = None, json: Any = None) -> Any:
        s = self.settings
        where = f"{method} {url.split('?')[0]}"
        attempt = 0
        while True:
            attempt += 1
            self.calls += 1
            try:
                response = self.client.request(method, url, params=params, json=json)
            except httpx2.TransportError as exc:
                if attempt <= s.retries:
                    self.sleep(s.retry_delay * 2 ** (attempt - 1))
                    continue
                raise ApiError(f"cannot reach the GitHub API at {s.api_url} ({where}): "
                               f"{type(exc).__name__}: {exc or 'no answer'} (after {attempt} attempts)") from None
            status = response.status_code
            if status < 300:
                return response.json() if response.content else None
            body = _json(response)
            message = body.get("message", "") if isinstance(body, dict) else ""
            wait = _rate_limit_wait(response, message)
            if wait is not None:
                if wait <= s.max_wait and attempt <= s.retries:
                    self.sleep(wait)
                    continue
                raise ApiError(f"GitHub API rate limit reached ({where}, HTTP {status}){_reset_note(response, wait)}",
                               status=status, fatal=True)
            if status >= 500:
                if attempt <= s.retries:
                    self.sleep(s.retry_delay * 2 ** (attempt - 1))
                    continue
                raise ApiError(f"GitHub API server error ({where}): HTTP {status} {message or response.reason_phrase}"
                               f" (after {attempt} attempts)", status=status)
            raise _client_error(where, status, message, body, s)


def _json(response: httpx2.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return {"message": response.text[:200]}


def _rate_limit_wait(response: httpx2.Response, message: str) -> float | None:
    """Seconds until GitHub accepts requests again when this answer is a rate limit, else None."""
    status = response.status_code
    if status not in (403, 429):
        return None
    headers = response.headers
    if "retry-after" in headers:
        try:
            return max(0.0, float(headers["retry-after"]))
        except ValueError:
            return 60.0
    if headers.get("x-ratelimit-remaining") == "0":
        try:
            return max(0.0, float(headers.get("x-ratelimit-reset", "0")) - time.time())
        except ValueError:
            return 60.0
    if status == 429 or "rate limit" in message.lower():  # secondary limit: GitHub asks for a minute at least
        return 60.0
    return None


def _reset_note(response: httpx2.Response, wait: float) -> str:
    reset = response.headers.get("x-ratelimit-reset")
    if reset and reset.isdigit():
        when = datetime.fromtimestamp(int(reset), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"; it resets at {when}"
    return f"; retry in {wait:.0f} s"


def _client_error(where: str, status: int, message: str, body: Any, s: Settings) -> ApiError:
    if status == 401:
        return ApiError(f"GitHub rejected the token (HTTP 401 {message or 'Bad credentials'}, {where}): check the "
                        f"token in GITHUB_TOKEN/GH_TOKEN or --token-env", status=401, fatal=True)
    if status == 403:
        return ApiError(f"no permission for {where} on {s.repo} (HTTP 403 {message}): the token needs "
                        f"'contents: write' and 'pull-requests: write' (in GitHub Actions also: Settings > Actions > "
                        f"'Allow GitHub Actions to create and approve pull requests')", status=403, fatal=True)
    if status == 404:
        return ApiError(f"not found: {where} (HTTP 404): does {s.repo} exist at {s.api_url}, and can the token see it?",
                        status=404, fatal=True)
    if status == 422:
        return ApiError(f"GitHub refused {where} (HTTP 422 {message}): {validation_errors(body)}", status=422, body=body)
    return ApiError(f"GitHub API error ({where}): HTTP {status} {message}", status=status, body=body)


def validation_errors(body: Any) -> str:
    errors = body.get("errors", []) if isinstance(body, dict) else []
    parts = []
    for error in errors:
        if isinstance(error, dict):
            parts.append(error.get("message") or " ".join(str(error.get(k, "")) for k in ("resource", "field", "code")).strip())
        else:
            parts.append(str(error))
    return "; ".join(p for p in parts if p) or "no details"


def already_exists(error: ApiError) -> bool:
    return error.status == 422 and "already exists" in validation_errors(error.body).lower()
