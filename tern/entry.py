"""The ``tern`` command: hot commands (verify, migrate) through the warm daemon, everything else through the CLI.

Why a separate entry point: importing ``tern.cli`` (typer, rich, then the command's stack)
costs more than a cached ``tern verify`` takes in the daemon. So the command line is
looked at first with imports of this module's own (``tern/thin.py``), and the typer app
is imported only for what the thin path leaves.
"""

from __future__ import annotations

import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] in (["verify"], ["migrate"]):
        from tern import thin

        code = (thin.verify if argv[0] == "verify" else thin.migrate)(argv[1:])
        if code is not None:
            sys.stdout.flush()
            raise SystemExit(code)
    from tern.cli import app

    app(prog_name="tern")
