"""``tern mcp``: the tools of ``tools.py`` served over MCP's stdio transport.

The ``mcp`` package is the optional extra ``tern[mcp]``, imported here inside functions
only. Every call runs under one deadline (``--timeout``): past it the call is cancelled
(its sandbox jobs with it, as the daemon cancels a job whose client hangs up) and the
agent gets a tool error naming the setting. Bad input is a tool error too, never a crash:
the server keeps serving.
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any, Callable

from tern.mcp import tools

INSTRUCTIONS = """Tern migrates TensorFlow/Keras packages to JAX/Flax and checks the translation.
Loop: translate (see the diff and TODOs) -> edit the translation -> verify (per module:
equivalent, mismatch, error, untested; first difference; max error) -> run_test for one
failing test -> explain_todo for a TODO left -> remaining for what is left. verify needs a
package written by `tern migrate` (or original=...); results are cached, so repeat calls are cheap."""


def build(project: Path, *, timeout: float, daemon: str) -> Any:
    """The MCPServer with tern's tools, each bound to ``project`` and ``daemon``."""
    import anyio
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("tern", instructions=INSTRUCTIONS)

    def tool(fn: Callable[..., Any], **bound: Any) -> None:
        signature = inspect.signature(fn)
        shown = signature.replace(parameters=[p for p in signature.parameters.values() if p.name not in bound])

        @functools.wraps(fn)
        async def call(**arguments: Any) -> dict[str, Any]:
            try:
                with anyio.fail_after(timeout):
                    if inspect.iscoroutinefunction(fn):
                        return await fn(**arguments, **bound)
                    return await anyio.to_thread.run_sync(functools.partial(fn, **arguments), abandon_on_cancel=True)
            except TimeoutError:
                raise ToolError(f"{fn.__name__} did not finish within {timeout:g}s (tern mcp --timeout); "
                                "its sandbox jobs were cancelled") from None
            except tools.BadInput as exc:
                raise ToolError(str(exc)) from None

        call.__signature__ = shown
        del call.__wrapped__  # the schema is the shown signature, without the bound settings
        server.add_tool(call, name=fn.__name__, description=inspect.getdoc(fn))

    tool(tools.translate)
    tool(tools.verify, project=project, daemon=daemon)
    tool(tools.run_test, project=project, daemon=daemon)
    tool(tools.explain_todo)
    tool(tools.remaining)
    return server


def serve(project: Path, *, timeout: float, daemon: str) -> int:
    import anyio

    anyio.run(build(project, timeout=timeout, daemon=daemon).run_stdio_async)
    return 0
