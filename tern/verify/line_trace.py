"""JAX worker task: run another verification task while noting which lines of the
translated package it executed.

Mutation testing (``eval/bench_mutation.py``) needs to tell a bug verification missed from
a change no check could see: a mutant on a line that neither the replays nor the
translated tests ever execute cannot change what they observe. Traced code counts: a
jitted function's Python body runs while JAX traces it.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path


def traced(payload: dict, scratch: Path) -> dict:
    """Task: run ``payload["task"]`` (a ``tern.`` task) on ``payload["payload"]`` and return
    ``{"value": its result, "lines": {file: [line, ...]}}`` for the files under
    ``payload["under"]`` (paths relative to it)."""
    module_name, _, name = payload["task"].partition(":")
    if not module_name.startswith("tern."):
        raise ValueError(f"only tern's tasks can be traced, not {payload['task']!r}")
    task = getattr(importlib.import_module(module_name), name)
    under = os.path.realpath(payload["under"]) + os.sep
    lines: dict[str, set[int]] = {}
    wanted: dict[str, bool] = {}

    def local(frame, event, arg):
        if event == "line":
            lines.setdefault(frame.f_code.co_filename, set()).add(frame.f_lineno)
        return local

    def on_call(frame, event, arg):
        filename = frame.f_code.co_filename
        keep = wanted.get(filename)
        if keep is None:
            keep = wanted[filename] = os.path.realpath(filename).startswith(under)
        if not keep:
            return None
        lines.setdefault(filename, set()).add(frame.f_lineno)
        return local

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        value = task(payload["payload"], scratch)
    finally:
        sys.settrace(previous)
    return {"value": value, "lines": {os.path.relpath(os.path.realpath(f), under): sorted(n)
                                      for f, n in lines.items()}}
