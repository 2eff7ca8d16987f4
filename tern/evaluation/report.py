"""The JSON of an eval run: every figure, and enough context to compare runs months apart.

The JSON is the one model every view renders (terminal, Markdown, HTML) and every
comparison reads, so a saved run and a fresh one are shown and compared the same way.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tern.evaluation.score import CaseResult, summary
from tern.evaluation.suite import Suite

SCHEMA = "tern-eval/1"


class EvalFileError(ValueError):
    """A file that is not the JSON of a tern eval run."""


def git_info(project: Path) -> dict[str, Any] | None:
    """The project's commit and whether tracked files differ from it; None outside git."""
    try:
        commit = subprocess.run(["git", "-C", str(project), "rev-parse", "HEAD"], check=False, capture_output=True, text=True,
                                timeout=10)
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(project), "status", "--porcelain", "--untracked-files=no"],
                               check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def build(suites: list[Suite], results: list[CaseResult], *, options: dict[str, Any], run: dict[str, Any],
          project: Path, started: datetime, seconds: float) -> dict[str, Any]:
    from importlib import metadata

    from tern.evaluation.run import LIBRARIES
    from tern.verify import keys

    try:
        version = metadata.version("tern")
    except metadata.PackageNotFoundError:
        version = "0+unknown"
    return {
        "schema": SCHEMA,
        "tern_version": version,
        "tern_fingerprint": keys.tern_fingerprint(),
        "libraries": dict(keys.versions(LIBRARIES)),
        "git": git_info(project),
        "timestamp": started.astimezone(UTC).isoformat(timespec="seconds"),
        "options": options,
        "suites": [{"name": s.name, "path": str(s.path), "cases": len(s.cases), "notes": list(s.notes)} for s in suites],
        "summary": summary(results),
        "run": {**run, "seconds": round(seconds, 3)},
        "cases": [r.to_dict() for r in results],
    }


def now() -> datetime:
    return datetime.now(UTC)


def dumps(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=1) + "\n"


def load(path: Path) -> dict[str, Any]:
    """A saved eval run; ``EvalFileError`` with a one-line reason otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EvalFileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalFileError(f"{path}: cannot read it ({exc})") from None
    except ValueError as exc:
        raise EvalFileError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("tern-eval/"):
        raise EvalFileError(f"{path}: not the JSON of a tern eval run (no \"schema\": \"{SCHEMA}\")")
    if data["schema"] != SCHEMA:
        raise EvalFileError(f"{path}: schema {data['schema']}; this tern reads {SCHEMA}")
    if not isinstance(data.get("cases"), list) or not all(isinstance(c, dict) and "id" in c and "status" in c
                                                          for c in data["cases"]):
        raise EvalFileError(f"{path}: a tern eval JSON without a valid \"cases\" list")
    if not isinstance(data.get("summary"), dict) or not {"score", "weighted", "counts"} <= set(data["summary"]):
        raise EvalFileError(f"{path}: a tern eval JSON without its \"summary\"")
    return data
