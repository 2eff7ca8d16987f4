"""Errors every command shares. Imports nothing from tern: every layer may use it."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad usage or configuration (a command line, an option, a config file that cannot be
    used): the command stops before doing anything, exit status 2, and the message is the
    one line the user sees."""
