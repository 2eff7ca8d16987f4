"""The tool loop as functions an agent calls: translate, verify, run one test, explain a
TODO, list what is left. Each returns a JSON-able dict; bad input raises ``BadInput``
with a message meant for the agent (``server.py`` turns it into a tool error).

Why here and not in the MCP server: these are tern's commands with structured answers,
whoever calls them; ``server.py`` only exposes them over MCP. Verification goes through
the same daemon, cache and sandbox as ``tern verify``; translation runs the same
``runner.migrate`` as ``tern migrate``, into a scratch directory.
"""

from __future__ import annotations

import ast
import tempfile
from pathlib import Path
from typing import Any

from tern.engine.report import TODO_LINE
from tern.status import Status



class BadInput(ValueError):
    """The arguments name nothing tern can work on; the message says why."""


def _existing(path: str, what: str = "path") -> Path:
    found = Path(path).expanduser()
    if not found.exists():
        raise BadInput(f"{what} {path}: no such file or directory")
    return found.resolve()


# -- translate ------------------------------------------------------------------------------


def translate(path: str, unit: str | None = None) -> dict[str, Any]:
    """Translate a package, or one file (in its package's context when it lies in one);
    with ``unit`` (a function or class of that file, ``Name`` or ``Class.method``), also
    that unit's translated source and TODOs. Nothing is written beside ``path``."""
    from tern.engine.runner import migrate

    source = _existing(path)
    if unit and not source.is_file():
        raise BadInput(f"unit {unit!r} needs path to be a .py file, not the directory {source}")
    in_package = source.is_file() and (source.parent / "__init__.py").is_file()
    root = source.parent if in_package else source
    with tempfile.TemporaryDirectory(prefix="tern-mcp-") as scratch:
        out = Path(scratch) / root.name
        try:
            report = migrate(root, out)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        wanted = source.relative_to(root).as_posix() if in_package else source.name if source.is_file() else None
        files = [f for f in report.files if wanted is None or f.path == wanted]
        for f in files:
            if wanted is not None and f.status == "error":
                where = f"{source}:{f.error_line}" if f.error_line else str(source)
                raise BadInput(f"{where}: cannot translate: {f.error}")
        answer = {"source": str(source), "files": [_file_answer(f) for f in files]}
        if unit:
            translated = out / wanted if in_package else out
            answer["unit"] = _unit(translated.read_text(encoding="utf-8"), unit, str(source))
    return answer


def _file_answer(f: Any) -> dict[str, Any]:
    return {"path": f.path, "status": f.status, "edits": len(f.edits), "error": f.error or None,
            "todos": [{"line": t.line, "construct": t.construct, "reason": t.reason} for t in f.todos],
            "diff": f.diff}


#: Keras method names and what a translated Flax module calls them
_RENAMED = {"call": "__call__", "build": "__call__"}


def _unit(text: str, name: str, source: str) -> dict[str, Any]:
    """The translated definition called ``name`` (``Class.method`` inside a class; a Keras
    layer's ``call`` is the module's ``__call__``)."""
    body: list[ast.stmt] = ast.parse(text).body
    node, found = None, []
    for part in name.split("."):
        defined = {n.name: n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        node = defined.get(part) or (defined.get(_RENAMED[part]) if node is not None and part in _RENAMED else None)
        if node is None:
            raise BadInput(f"{source} defines no {name!r} (a function, class or Class.method)")
        found.append(node.name)
        body = node.body
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    lines = text.splitlines()
    while first > 1 and TODO_LINE.search(lines[first - 2]):  # TODOs stand above what they are about
        first -= 1
    segment = lines[first - 1:node.end_lineno]
    return {"name": ".".join(found), "line": first, "source": "\n".join(segment) + "\n",
            "todos": [_todo_of(line, first + i) for i, line in enumerate(segment) if TODO_LINE.search(line)]}


def _todo_of(line: str, number: int) -> dict[str, Any]:
    match = TODO_LINE.search(line)
    return {"line": number, "construct": match["construct"], "reason": match["reason"]}


# -- verify and run one test ----------------------------------------------------------------


def _targets(path: str, original: str | None) -> list[Any]:
    from tern.verify.cli import TargetError, find_targets

    translated = _existing(path, "path")
    try:
        return find_targets(translated, _existing(original, "original") if original else None)
    except TargetError as exc:
        raise BadInput(str(exc)) from None


async def verify(path: str, original: str | None = None, module: str | None = None, use_cache: bool = True,
                 search: bool = True, *, project: Path, daemon: str) -> dict[str, Any]:
    """Verify a translated package (or a directory of them), as ``tern verify`` does;
    with ``module``, answer for that module alone (the package's other jobs come from
    the cache when they are there). ``search=False`` skips the gradient-ascent search
    beyond the probes: a quicker check between edits (search before calling it done)."""
    from tern.verify.cli import verify_targets
    from tern.verify.report import problem_lines

    targets = _targets(path, original)
    reports, info = await verify_targets(targets, project=project, daemon=daemon, use_cache=use_cache, workers=None,
                                         search=None if search else False)
    rows = [_row_answer(row) for report in reports for row in report.rows]
    if module is not None:
        rows = [row for row in rows if row["module"] == module]
        if not rows:
            known = ", ".join(row.module for report in reports for row in report.rows)
            raise BadInput(f"no module {module!r} in {path}; its modules: {known}")
    return {"status": _overall([row["status"] for row in rows]), "modules": rows,
            "findings": [line for report in reports for line in problem_lines(report)],
            "cache": {"hits": info["cache_hits"], "misses": info["cache_misses"]},
            "isolation": info["isolation"]["level"], "warm_daemon": info["daemon"]}


def _overall(statuses: list[str]) -> str:
    return Status.worst(statuses, default=Status.UNTESTED)


def _row_answer(row: Any) -> dict[str, Any]:
    return {"module": row.module, "status": row.status, "cached": row.cached,
            "tests": {"passed": row.tests_passed, "failed": row.tests_failed, "errors": row.tests_errors,
                      "total": row.tests_total, "not_run": row.not_run},
            "replay": {"matched": row.cases_matched, "total": row.cases_total},
            "train": {"matched": row.train_matched, "total": row.train_total},
            "max_abs_error": row.max_abs, "max_rel_error": row.max_rel,
            "first_difference": row.problems[0] if row.problems else None, "problems": row.problems,
            "covered_by": row.covered_by}


async def run_test(path: str, test: str, original: str | None = None, *, project: Path, daemon: str) -> dict[str, Any]:
    """Run one translated test, ``FILE::NAME`` with FILE relative to the translated package
    (``tests/test_model.py::test_forward``), in a sandbox worker; uncached."""
    from tern.sandbox.daemon import find_project
    from tern.sandbox.executor import open_executor
    from tern.verify.cache import Cache
    from tern.verify.config import load_config
    from tern.verify.run import PackageVerifier

    targets = _targets(path, original)
    if len(targets) != 1:
        raise BadInput(f"{path} holds {len(targets)} packages; name one translated package")
    target = targets[0]
    file, sep, name = test.partition("::")
    test_file = (target.translated / file).resolve()
    if not sep or not name or not test_file.is_file() or not test_file.is_relative_to(target.translated):
        raise BadInput(f"test {test!r}: expected FILE::NAME with FILE a test file under {target.translated}")
    cache = Cache(find_project(project) / ".tern", enabled=False)
    try:
        async with open_executor(project, None, daemon=daemon) as runner:
            verifier = PackageVerifier(target.original, target.translated, runner=runner, cache=cache,
                                       config=load_config(target.original))
            result = await verifier.one_test(test_file, name)
    finally:
        cache.close()
    if not result.ok:
        return {"test": test, "outcome": f"{result.cause}: {result.error.strip()[-2000:]}", "passed": False, "details": {}}
    outcomes = result.value["tests"]
    if not outcomes:
        raise BadInput(f"test {test!r}: pytest collected nothing by that name in {test_file}")
    return {"test": test, "passed": all(o == "passed" for o in outcomes.values()),
            "outcomes": outcomes, "details": result.value["details"], "seconds": round(result.seconds, 3)}


# -- explain a TODO and list what is left ---------------------------------------------------


def explain_todo(path: str, line: int) -> dict[str, Any]:
    """The TODO at ``path:line`` (on that line, or the comment just above it), the table
    row behind it, and why it was left."""
    from tern.engine.records import tables

    file = _existing(path)
    if not file.is_file():
        raise BadInput(f"path {file} is a directory; name the translated file holding the TODO")
    lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
    if not 1 <= line <= len(lines):
        raise BadInput(f"{file} has {len(lines)} lines, not {line}")
    at = next((n for n in (line, line - 1) if n >= 1 and TODO_LINE.search(lines[n - 1])), None)
    if at is None:
        raise BadInput(f"{file}:{line}: no '# TODO(tern)' comment on this line or the one above")
    todo = _todo_of(lines[at - 1], at)
    symbol = todo["construct"].split(":")[0].split()[-1]
    record, kind = _record_for(symbol, tables())
    if record is None:
        why = ("no table row names this symbol: no rule translates it yet; a record under rules/api/ or "
               "rules/layers/ would (docs/rules.md)")
    elif getattr(record, "todo", ""):
        where = (" outside a function that runs under jax.enable_x64 (rules/structure/x64_scopes.py)"
                 if getattr(record, "x64", False) else "")
        why = f"its table row ({record.origin}) says it is never translated automatically{where}: {record.todo}"
    else:
        why = f"its table row ({record.origin}) translates it, but not this use: {todo['reason']}"
    return {**todo, "file": str(file), "symbol": symbol, "kind": kind, "why": why,
            "record": None if record is None else _record_answer(record)}


def _record_for(symbol: str, tables: Any) -> tuple[Any, str | None]:
    full = "tensorflow." + symbol[3:] if symbol.startswith("tf.") else symbol
    for prefix, canonical in tables.canonical:
        if full == prefix or full.startswith(prefix + "."):
            full = canonical + full[len(prefix):]
            break
    for kind, index in (("api", tables.api), ("layer", tables.layers)):
        if full in index:
            return index[full], kind
    return None, None


def _record_answer(record: Any) -> dict[str, Any]:
    fields = ("source", "aliases", "target", "template", "todo", "note", "origin", "rule_id")
    return {name: getattr(record, name) for name in fields if getattr(record, name, None) not in (None, "", ())}


def remaining(path: str) -> dict[str, Any]:
    """What is left in a translation: every ``TODO(tern)`` in its files, and the modules the
    last ``tern verify`` report beside it did not find equivalent (with ``stale`` when a
    file changed after that report)."""
    import json

    root = _existing(path)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    todos = []
    for file in files:
        for number, text in enumerate(file.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if TODO_LINE.search(text):
                todos.append({"file": str(file.relative_to(root.parent)), **_todo_of(text, number)})
    answer: dict[str, Any] = {"path": str(root), "todos": todos, "verify": None}
    report = root.with_name(root.name + ".tern-verify.json")
    if report.is_file():
        data = json.loads(report.read_text(encoding="utf-8"))
        left = [{"module": row["module"], "status": row["status"], "first_difference": (row["problems"] or [None])[0]}
                for package in data.get("packages", []) for row in package["rows"] if row["status"] != Status.EQUIVALENT]
        newest = max((f.stat().st_mtime for f in files), default=0.0)
        answer["verify"] = {"report": str(report), "not_equivalent": left, "stale": newest > report.stat().st_mtime}
    return answer
