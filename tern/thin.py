"""The thin ``tern verify`` and ``tern migrate``: ask the project's warm daemon to run them, and print its answer.

Why: the CLI imported typer, rich and the translate stack (about a second) before asking a
daemon that had all of it warm. This module imports only ``socket``, ``json`` and
``tern.sandbox.daemon``. The daemon runs the command with the same code as the CLI
(``tern/verify/served.py``, ``tern/migrate_command.py``) and sends back the output as this
terminal would show it. Whatever it cannot forward (another option, ``--help``,
``--daemon never``, no daemon running or a stale one, a Ray executor; for migrate:
``--verify``, the LLM fallback, ``-j`` above 1) it leaves to the full CLI, which behaves
as before. A verify through the CLI starts the daemon when one is wanted, so the next
run is thin; a migrate alone starts none.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

from tern.sandbox.daemon import LINE_LIMIT, decode, encode, identity, paths_for, resolve_mode

#: the environment variables rich reads to decide colours, terminal-ness and size
CONSOLE_ENV = ("TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES")

_OPTIONS = {"--original": "original", "--json": "json", "--daemon": "daemon", "--workers": "workers",
            "--executor": "executor", "--project": "project"}
_FLAGS = {"--no-cache": "no_cache", "--no-search": "no_search"}


def parse_verify(argv: list[str]) -> dict[str, Any] | None:
    """``tern verify``'s arguments, or None for anything but a plain well-formed call
    (the full CLI then parses it, and owns every usage message)."""
    return _parse(argv, _OPTIONS, _FLAGS)


_MIGRATE_OPTIONS = {"--out": "out", "-o": "out", "--report": "report", "--daemon": "daemon", "--jobs": "jobs", "-j": "jobs"}
_MIGRATE_FLAGS = {"--in-place": "in_place", "--dry-run": "dry_run", "--quiet": "quiet", "-q": "quiet", "--no-llm": "no_llm"}
#: the environment variable naming the LLM (``tern.agent.config.MODEL_ENV``): the daemon must see the client's
MODEL_ENV = "TERN_LLM_MODEL"


def parse_migrate(argv: list[str]) -> dict[str, Any] | None:
    """``tern migrate``'s arguments when it is a plain rules-only run in one process, else None
    (``--verify``, ``--llm``, the LLM's settings, ``-j`` above 1, ``--help``, anything unknown:
    the full CLI parses those, and owns every usage message)."""
    args = _parse(argv, _MIGRATE_OPTIONS, _MIGRATE_FLAGS)
    if args is None or args.pop("jobs", "1") != "1":
        return None
    return args


def _parse(argv: list[str], options: dict[str, str], flags: dict[str, str]) -> dict[str, Any] | None:
    """Options (``--name value``, ``--name=value``, ``-x value``) and flags into a dict with the
    one positional argument as ``path``; None for anything else (combined short flags too)."""
    args: dict[str, Any] = {}
    positional: list[str] = []
    tokens = iter(argv)
    for token in tokens:
        name, eq, value = token.partition("=") if token.startswith("--") else (token, "", "")
        if name in flags and not eq:
            args[flags[name]] = True
        elif name in options:
            value = value if eq else next(tokens, None)
            if value is None:
                return None
            args[options[name]] = value  # repeated: the last wins, as in click
        elif token.startswith("-") and token != "-":
            return None
        else:
            positional.append(token)
    if len(positional) != 1:
        return None
    args["path"] = positional[0]
    return args


def _forwardable(args: dict[str, Any]) -> bool:
    try:
        mode = resolve_mode(args.pop("daemon", "auto"))
    except ValueError:
        return False
    workers = args.pop("workers", "1")  # only for a server started here, and this client starts none
    return mode != "never" and workers.isdigit() and int(workers) >= 1 and args.get("executor", "local") == "local"


def _console() -> dict[str, Any]:
    """What the daemon needs to render as rich would here: rich probes the terminal size
    on the standard streams, then reads COLUMNS and LINES."""
    size = None
    for fd in (0, 1, 2):
        try:
            size = list(os.get_terminal_size(fd))
            break
        except (OSError, ValueError):
            continue
    return {"stdout": sys.stdout.isatty(), "stderr": sys.stderr.isatty(), "size": size,
            "env": {k: os.environ[k] for k in CONSOLE_ENV if k in os.environ}}


def verify(argv: list[str]) -> int | None:
    """Run ``tern verify ARGV`` through the daemon: its exit code, or None to leave the
    command to the full CLI (nothing has been printed then, unless the daemon failed
    mid-run, which a note on stderr says)."""
    args = parse_verify(argv)
    if args is None or not _forwardable(args):
        return None
    return _forward("verify", args, args.get("project") or "")


def migrate(argv: list[str]) -> int | None:
    """``tern migrate ARGV`` through the daemon, as ``verify``. The daemon reads the LLM
    settings with this process's ``TERN_LLM_MODEL``: a configured LLM sends the run back."""
    args = parse_migrate(argv)
    if args is None or not _forwardable(args):
        return None
    return _forward("migrate", args, "")


def _forward(op: str, args: dict[str, Any], project: str) -> int | None:
    cwd = os.getcwd()
    try:
        paths = paths_for(Path(cwd, project))
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(str(paths.socket))
    except OSError:  # no server (no socket, or a stale one): the full CLI starts one
        return None
    request = {"op": op, "tern": identity(), "cwd": cwd, "args": args, "console": _console(),
               "env": {k: os.environ[k] for k in (MODEL_ENV,) if k in os.environ}}
    with connection:
        try:
            connection.sendall(encode(request))
            replies = connection.makefile("rb")
        except OSError:
            return None
        while True:
            try:  # only the socket's failures fall back; this process's own output fails as it would in the CLI
                line = replies.readline(LINE_LIMIT)
                message = decode(line) if line.endswith(b"\n") else None
            except KeyboardInterrupt:  # closing the connection cancels the server's jobs
                return 130
            except (OSError, ValueError) as exc:
                message = {"error": f"its answer broke off: {exc}"}
            if message is None:
                message = {"error": "it closed the connection without an answer"}
            if "stderr" in message:  # progress, while the jobs run
                sys.stderr.write(message["stderr"])
                sys.stderr.flush()
            elif "done" in message:
                sys.stdout.write(message["done"]["stdout"])
                sys.stdout.flush()
                sys.stderr.write(message["done"]["stderr"])
                return int(message["done"]["exit"])
            elif "fallback" in message:
                return None
            else:
                sys.stderr.write(f"tern: the server could not {op} ({message.get('error')}); running it in this process\n")
                return None
