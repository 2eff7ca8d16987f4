"""The node side of the Ray executor: an actor that owns a local ``Sandbox``.

Why a Sandbox inside the actor rather than jobs as Ray tasks: the Sandbox is what isolates
jobs (namespaces, the audit hook, limits, the watchdog) and turns every end into a
``JobResult`` cause; running it unchanged on each node makes a job's result the same on a
cluster as on one machine. Ray only places actors, carries bytes and reports dead actors.

Each actor keeps its own state directory on its node (``TERN_RAY_STATE``, default
``<tmp>/tern-ray-<uid>``, then ``actors/<pid>-<n>/``): the Sandbox mounts it read-only
into its workers, and the trees jobs read are unpacked under it (``sources/<digest>/``),
so a job can no more write its inputs on a node than it can write ``.tern/`` locally.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import socket
import tempfile
import uuid
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from tern.sandbox import procfs, sources
from tern.sandbox.jobs import Job, JobResult

_serial = itertools.count()


def node_root() -> Path:
    return Path(os.environ.get("TERN_RAY_STATE") or Path(tempfile.gettempdir()) / f"tern-ray-{os.getuid()}")


def _clear_dead(actors: Path) -> None:
    """State left by actors killed on this node: their workers died with them (parent-death
    signal); their directories are removed here."""
    procfs.kill_orphans(f"{actors}{os.sep}")
    for folder in actors.iterdir() if actors.is_dir() else ():
        pid = folder.name.partition("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(folder, ignore_errors=True)


class NodeSandbox:
    """One actor: a Sandbox of ``workers`` workers for jobs of one kind, on one node.

    The Sandbox lives in a task of the actor's event loop (anyio ties a task group to the
    task that entered it); ``run`` calls from Ray's tasks use it concurrently, as the
    daemon's connections do.
    """

    def __init__(self, kind: str, workers: int | None = None) -> None:
        actors = node_root() / "actors"
        actors.mkdir(parents=True, exist_ok=True)
        _clear_dead(actors)
        self.kind = kind
        self.state = actors / f"{os.getpid()}-{next(_serial)}-{uuid.uuid4().hex[:8]}"
        self.workers = workers
        self.sandbox: Any = None
        self.store = self.state / "sources"
        self.in_flight = 0
        self._unpacking: dict[str, asyncio.Lock] = {}
        self._stop = asyncio.Event()
        self._host: asyncio.Task | None = None

    async def start(self) -> dict[str, Any]:
        """Open the Sandbox; the facts the driver checks (tern's and the libraries' versions:
        a node with other versions would give results the driver's cache keys do not describe)."""
        import ray

        from tern.sandbox.pool import Sandbox
        from tern.sandbox import identity as keys

        if self._host is None:
            ready: asyncio.Future = asyncio.get_running_loop().create_future()

            async def host() -> None:
                try:
                    async with Sandbox(self.state, workers=self.workers) as sandbox:
                        self.sandbox = sandbox
                        ready.set_result(None)
                        await self._stop.wait()
                except BaseException as error:
                    if not ready.done():
                        ready.set_exception(error)
                    raise

            self._host = asyncio.ensure_future(host())
            await ready
        return {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "pid": os.getpid(),
                "kind": self.kind, "sources": str(self.store), "workers": self.sandbox.size, "isolation": self.sandbox.level,
                "versions": keys.versions(tuple(dict.fromkeys(keys.TF_LIBRARIES + keys.JAX_LIBRARIES))),
                "tern": keys.tern_fingerprint()}

    async def run(self, job_json: str, trees: list[dict[str, Any]]) -> dict[str, Any]:
        """Run one job whose paths already name this node's copies of ``trees``; the result,
        and the job's output directory packed for the trip back when it made one."""
        self.in_flight += 1
        try:
            for tree in trees:
                async with self._unpacking.setdefault(tree["digest"], asyncio.Lock()):
                    if not (self.store / tree["digest"]).is_dir():
                        data = await tree["ref"][0]  # nested in a list: Ray ships it only when missing here
                        await asyncio.to_thread(sources.unpack_once, lambda data=data: data, self.store, tree["digest"])
            job = Job.from_json(job_json)
            output = None
            if job.output:
                job = replace(job, output=str(self.state / "outputs" / uuid.uuid4().hex))
                (self.state / "outputs").mkdir(exist_ok=True)
            result = await self.sandbox.run(job)
            if job.output and result.ok and os.path.isdir(job.output):
                output = await asyncio.to_thread(sources.pack_files, Path(job.output))
            if job.output:
                shutil.rmtree(job.output, ignore_errors=True)
            return {"result": asdict(result), "output": output}
        finally:
            self.in_flight -= 1

    def status(self) -> dict[str, Any]:
        return {"in_flight": self.in_flight, "sandbox": self.sandbox.status() if self.sandbox else None}

    async def close(self) -> None:
        """Stop the Sandbox (its workers are killed and reaped) and remove this actor's state."""
        self._stop.set()
        if self._host is not None:
            try:
                await self._host
            except BaseException:  # noqa: BLE001 - closing regardless
                pass
        await asyncio.to_thread(shutil.rmtree, self.state, True)


def result_of(reply: dict[str, Any]) -> JobResult:
    return JobResult(**reply["result"])
