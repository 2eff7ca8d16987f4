"""Where sandbox jobs run: this machine's pool (``local``, the default) or a Ray cluster.

```toml
[tool.tern.executor]
kind = "ray"                 # "local" (default) or "ray"
address = "auto"             # the cluster (ray.init's address); unset: RAY_ADDRESS, else a local one
workers = 4                  # workers per kind on each node (default: the node's CPU count)
runtime_env = { env_vars = { TF_CPP_MIN_LOG_LEVEL = "2" } }   # passed to ray.init
```

``--executor`` and ``--address`` on ``tern verify`` and ``tern eval`` override the file.
Either way the caller gets a Runner (``run(job) -> JobResult``, ``status()``), so what
verifies does not know which it has.
"""

from __future__ import annotations

import tomllib
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator

from tern.sandbox.daemon import find_project

KINDS = ("local", "ray")


class ExecutorError(ValueError):
    """The executor settings are wrong; the message names the setting."""


@dataclass(frozen=True)
class ExecutorConfig:
    kind: str = "local"
    address: str | None = None
    workers: int | None = None
    runtime_env: dict[str, Any] = field(default_factory=dict)


def load_executor(project: Path, kind: str | None = None, address: str | None = None) -> ExecutorConfig:
    """The project's ``[tool.tern.executor]`` with the command line's choices on top."""
    path = find_project(project) / "pyproject.toml"
    raw: dict[str, Any] = {}
    if path.is_file():
        try:
            raw = tomllib.loads(path.read_text()).get("tool", {}).get("tern", {}).get("executor", {})
        except tomllib.TOMLDecodeError as exc:
            raise ExecutorError(f"{path}: {exc}") from None
    unknown = set(raw) - {"kind", "address", "workers", "runtime_env"}
    if unknown:
        raise ExecutorError(f"{path}: [tool.tern.executor] has unknown keys {sorted(unknown)}")
    chosen = kind or raw.get("kind", "local")
    if chosen not in KINDS:
        raise ExecutorError(f"executor must be one of {KINDS}, not {chosen!r}")
    workers = raw.get("workers")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ExecutorError(f"{path}: [tool.tern.executor] workers must be a positive integer")
    runtime_env = raw.get("runtime_env", {})
    if not isinstance(runtime_env, dict):
        raise ExecutorError(f"{path}: [tool.tern.executor] runtime_env must be a table")
    return ExecutorConfig(kind=chosen, address=address or raw.get("address"), workers=workers, runtime_env=runtime_env)


@asynccontextmanager
async def open_executor(project: Path, config: ExecutorConfig | None, *, daemon: str = "auto", workers: int | None = None,
                        writable_roots: tuple[Path, ...] = ()) -> AsyncIterator[Any]:
    """The Runner ``config`` asks for; ``workers`` (the command line's) wins over the file's."""
    if config is not None and config.kind == "ray":
        from tern.sandbox.ray_runner import open_ray_runner

        async with open_ray_runner(address=config.address, workers=workers or config.workers,
                                   runtime_env=config.runtime_env) as runner:
            yield runner
        return
    from tern.sandbox.client import open_runner

    async with open_runner(project, daemon=daemon, workers=workers, writable_roots=writable_roots) as runner:
        yield runner
