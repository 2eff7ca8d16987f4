"""An MCP client session to ``tern mcp`` over stdio (the real ``mcp`` client), held open in
a thread of its own so that every test of a module calls the same server process."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
from pathlib import Path

from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
SAFETY = 600.0  # bounds a hung call; never a threshold on speed


def child_env() -> dict[str, str]:
    """What the server needs of this environment (the client passes only a safe few)."""
    env = {k: v for k, v in os.environ.items() if k.startswith("TERN_") and k != "TERN_DAEMON"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return env


class Session:
    def __init__(self, project: Path, *args: str) -> None:
        params = StdioServerParameters(command=sys.executable, cwd=str(project), env=child_env(),
                                       args=["-m", "tern", "mcp", "--project", str(project), *args])
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self._ready: concurrent.futures.Future = concurrent.futures.Future()
        self._held = asyncio.run_coroutine_threadsafe(self._hold(params), self.loop)
        self._ready.result(SAFETY)

    async def _hold(self, params: StdioServerParameters) -> None:
        self._close = asyncio.Event()
        try:
            async with Client(params) as client:
                self.client = client
                self._ready.set_result(None)
                await self._close.wait()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            raise

    def run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(SAFETY)

    def call(self, tool: str, **arguments):
        """(is_error, the structured result or the error's text)."""
        result = self.run(self.client.call_tool(tool, arguments))
        if result.is_error:
            return True, " ".join(getattr(c, "text", "") for c in result.content)
        return False, result.structured_content["result"]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._close.set)
        self._held.result(SAFETY)
        self.loop.call_soon_threadsafe(self.loop.stop)
