"""``tern verify`` answered inside the daemon, for the thin client (``tern/thin.py``).

Why: the daemon already holds the verify stack imported and the workers warm, so a cached
verify costs it milliseconds, while a CLI process importing the stack costs about a second.
The daemon runs the same code as ``tern verify --daemon never`` would (``verify_with``,
``finish``) with its own Sandbox, and renders the output with rich as the client's
terminal would show it: the client sends whether its streams are terminals, its size and
the environment variables rich reads, and writes back what it gets, byte for byte.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.markup import escape

from tern.thin import CONSOLE_ENV


class _Stream(io.StringIO):
    """A buffer that is a terminal exactly when the client's stream is one."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty

    def take(self) -> str:
        text = self.getvalue()
        self.seek(0)
        self.truncate()
        return text


def client_console(spec: dict[str, Any], stream: str) -> tuple[Console, _Stream]:
    """A rich Console that decides as the client's would: rich probes the size of the
    process's own terminal, so the client's probe (``size``) stands in for it."""
    env = {k: v for k, v in (spec.get("env") or {}).items() if k in CONSOLE_ENV and isinstance(v, str)}
    buffer = _Stream(bool(spec.get(stream)))
    console = Console(file=buffer, _environ=env, emoji=False)
    size = spec.get("size")
    if size and not console.is_dumb_terminal:
        width = int(env["COLUMNS"]) if env.get("COLUMNS", "").isdigit() else size[0]
        height = int(env["LINES"]) if env.get("LINES", "").isdigit() else size[1]
        console.size = (width or 80, height or 25)
    return console, buffer


async def answer_verify(request: dict[str, Any], runner: Any, emit: Callable[[str], None]) -> dict[str, Any]:
    """``{"stdout", "stderr", "exit"}`` for a ``verify`` request, or ``{"fallback": why}``
    when the command is one the client must run itself (a Ray executor). ``emit`` sends
    progress for the client's stderr while the jobs run."""
    from tern.sandbox.executor import load_executor
    from tern.verify.cli import TargetError, finish, find_targets, verify_with
    from tern.verify.config import ConfigError

    args, cwd = request["args"], Path(request["cwd"])
    out, out_buffer = client_console(request.get("console", {}), "stdout")
    err, err_buffer = client_console(request.get("console", {}), "stderr")

    def anchored(value: str | None) -> Path | None:
        return None if value is None else cwd / value

    def progress(message: str) -> None:
        if err.is_terminal:
            err.print(f"[dim]{escape(message)}[/]")
            emit(err_buffer.take())

    project = anchored(args.get("project")) or cwd
    try:
        targets = find_targets(anchored(args["path"]), anchored(args.get("original")))
        if load_executor(project, args.get("executor")).kind != "local":
            return {"fallback": "the executor is not this machine's pool"}
        reports, info = await verify_with(runner, targets, project=project, use_cache=not args.get("no_cache"),
                                          progress=progress, search=False if args.get("no_search") else None)
        code = finish(reports, info, targets, Path(args["json"]) if args.get("json") else None, out, cwd=cwd)
    except (TargetError, ConfigError, ValueError) as exc:
        err_buffer.write(f"error: {exc}\n")
        code = 2
    return {"stdout": out_buffer.take(), "stderr": err_buffer.take(), "exit": code}
