"""The driver side of the Ray executor: a Runner, like ``LocalRunner`` and ``DaemonRunner``.

Verification and evaluation call ``run(job) -> JobResult`` as they always do; here the job
goes to a ``NodeSandbox`` actor (``ray_executor.py``) of its kind, one per kind per node,
each running up to its Sandbox's worker count at once. What the job reads travels by
content hash (``sources.py``): each tree is put in Ray's object store once per content and
fetched by a node only when its copy is missing. What a job made for later jobs
(``Job.output``) comes back packed and is published on the driver by rename, as the local
pool publishes it.

Faults: a job whose actor dies under it (the actor was killed, its node went away) is
run again on another actor, at most ``MAX_ATTEMPTS`` times in all, and an actor is started
in place of the dead one (at most ``MAX_STARTS`` per node and kind). A job that crashes its
*worker* is not a fault of the executor: the node's Sandbox reports it ("crash", "memory",
...) exactly as the local pool does, and it is not retried, as it is not locally.
Cancelling a ``run`` (Ctrl-C) cancels its Ray task, which kills the job's worker; closing
the runner closes every actor (workers killed, state removed) and then kills it.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, AsyncIterator

import anyio

from tern.sandbox import sources
from tern.sandbox.isolation import warning as isolation_warning
from tern.sandbox.jobs import Job, JobResult
from tern.sandbox.pool import publish
from tern.sandbox.ray_executor import NodeSandbox, result_of

MAX_ATTEMPTS = 3  # actors a job is tried on before it ends "crash" (each try lost its actor)
MAX_STARTS = 3  # actors started per node and kind in one run (the first and two replacements)
CLOSE_TIMEOUT = 20.0  # seconds an actor gets to stop its workers before it is killed
NAMESPACE = "tern"
ACTOR_START_TIMEOUT = 600.0  # seconds for an actor to be placed and open its Sandbox (a runtime_env may install packages)
NODES_TTL = 5.0  # seconds the list of alive nodes is trusted


class RayUnavailable(RuntimeError):
    """Ray is not installed, or no cluster could be reached; the message says which."""


def require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable("the Ray executor needs Ray: pip install 'tern[ray]' (or pip install 'ray>=2.40')") from None
    return ray


@dataclass(eq=False)
class _Actor:
    handle: Any
    facts: dict[str, Any]
    busy: int = 0
    dead: bool = False

    @property
    def free(self) -> bool:
        return not self.dead and self.busy < self.facts["workers"]


@dataclass
class _Kind:
    changed: anyio.Condition = field(default_factory=anyio.Condition)
    actors: list[_Actor] = field(default_factory=list)
    starts: dict[str, int] = field(default_factory=dict)  # node id -> actors started there
    errors: list[str] = field(default_factory=list)


class ActorPool:
    """The actors of each kind, started on first use of the kind, one per alive node."""

    def __init__(self, ray: Any, workers: int | None, env: dict[str, str]) -> None:
        self.ray, self.workers, self.env = ray, workers, env
        self.id = uuid.uuid4().hex[:8]
        self.kinds: dict[str, _Kind] = {}
        self.lost = 0
        self._serial = 0
        self._expected = _driver_facts()
        self._alive: list[str] = []
        self._nodes_at = -NODES_TTL

    async def acquire(self, kind: str) -> _Actor | str:
        """A live actor of ``kind`` with a free worker (waiting for one), or why there is none."""
        group = self.kinds.setdefault(kind, _Kind())
        async with group.changed:
            while True:
                live = [a for a in group.actors if not a.dead]
                covered = {a.facts["node"] for a in live}
                missing = [n for n in self._nodes() if n not in covered and group.starts.get(n, 0) < MAX_STARTS]
                if missing:
                    await self._start(kind, group, missing)
                    live = [a for a in group.actors if not a.dead]
                if not live:
                    return f"no Ray actor for {kind} jobs could be started: {'; '.join(group.errors[-3:]) or 'no alive nodes'}"
                free = [a for a in live if a.free]
                if free:
                    actor = min(free, key=lambda a: a.busy)
                    actor.busy += 1
                    return actor
                await group.changed.wait()

    async def release(self, kind: str, actor: _Actor) -> None:
        group = self.kinds[kind]
        async with group.changed:
            actor.busy -= 1
            group.changed.notify_all()

    def died(self, actor: _Actor) -> None:
        if not actor.dead:
            actor.dead = True
            self.lost += 1
            self._nodes_at = -NODES_TTL  # its node may be gone too: ask again

    def _nodes(self) -> list[str]:
        """Alive nodes, asked of the cluster at most every ``NODES_TTL`` seconds (not once per job)."""
        now = time.monotonic()
        if now - self._nodes_at > NODES_TTL:
            self._alive = [n["NodeID"] for n in self.ray.nodes() if n.get("Alive")]
            self._nodes_at = now
        return self._alive

    async def _start(self, kind: str, group: _Kind, nodes: list[str]) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        remote = self.ray.remote(NodeSandbox)
        started = []
        for node in nodes:
            group.starts[node] = group.starts.get(node, 0) + 1
            self._serial += 1
            options = {"num_cpus": 0, "max_restarts": 0, "max_concurrency": 1000, "namespace": NAMESPACE,
                       "name": f"tern-{kind}-{self.id}-{self._serial}",
                       "scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}
            if self.env:
                options["runtime_env"] = {"env_vars": self.env}
            handle = remote.options(**options).remote(kind, self.workers)
            started.append((node, handle, handle.start.remote()))
        for node, handle, facts_ref in started:
            facts, why = None, f"the actor did not start within {ACTOR_START_TIMEOUT:g} s"  # e.g. its node left
            try:
                with anyio.move_on_after(ACTOR_START_TIMEOUT):
                    facts = await facts_ref
            except self.ray.exceptions.RayError as error:
                why = _last_line(error)
            if facts is None:
                group.errors.append(f"node {node[:12]}: {why}")
                self.ray.kill(handle)
                continue
            if problem := _mismatch(facts, self._expected):
                group.errors.append(f"node {node[:12]} ({facts['host']}): {problem}")
                group.starts[node] = MAX_STARTS  # starting again would not help
                self.ray.kill(handle)
                continue
            group.actors.append(_Actor(handle, facts))

    def status(self) -> dict[str, Any]:
        actors = [{**{k: a.facts[k] for k in ("node", "host", "pid", "kind", "workers", "isolation")},
                   "busy": a.busy, "dead": a.dead} for g in self.kinds.values() for a in g.actors]
        return {"kind": "ray", "nodes": len(self._nodes()), "actors": actors, "lost_actors": self.lost,
                "errors": [e for g in self.kinds.values() for e in g.errors]}

    async def close(self) -> None:
        """Close every live actor (shielded: this runs while a cancelled run unwinds), then kill all."""
        handles = [a.handle for g in self.kinds.values() for a in g.actors]
        live = [a.handle for g in self.kinds.values() for a in g.actors if not a.dead]
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_TIMEOUT):
            refs = [h.close.remote() for h in live]
            for ref in refs:
                try:
                    await ref
                except self.ray.exceptions.RayError:
                    pass
        for handle in handles:
            self.ray.kill(handle)


class Shipper:
    """The trees jobs read, packed once per content into Ray's object store."""

    def __init__(self, ray: Any) -> None:
        self.ray = ray
        self.refs: dict[str, Any] = {}  # digest -> ObjectRef of the tar bytes
        self._packed: dict[str, tuple[tuple, str]] = {}  # path -> (signature, digest)
        self.bytes_shipped = 0
        self._lock = threading.Lock()  # jobs pack in worker threads; one tree is packed and put once

    def trees(self, job: Job) -> dict[str, str]:
        """Driver directory -> digest for each directory ``job`` reads: its ``sys_path``
        entries and the absolute directory paths its payload names."""
        wanted = [p for p in dict.fromkeys([*job.sys_path, *_payload_dirs(job.payload)]) if os.path.isdir(p)]
        return {path: self._digest(Path(path)) for path in wanted}

    def _digest(self, root: Path) -> str:
        with self._lock:
            return self._digest_locked(root)

    def _digest_locked(self, root: Path) -> str:
        signature = sources.signature(root)
        known = self._packed.get(str(root))
        if known and known[0] == signature:
            return known[1]
        digest, data = sources.pack(root)
        if digest not in self.refs:
            self.refs[digest] = self.ray.put(data)
            self.bytes_shipped += len(data)
        self._packed[str(root)] = (signature, digest)
        return digest


def _payload_dirs(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if os.path.isabs(value) and os.path.isdir(value) else []
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [d for item in value for d in _payload_dirs(item)]
    return []


class RayRunner:
    """Jobs on the cluster's actors; same contract as the local runners."""

    warm_daemon = False

    def __init__(self, ray: Any, pool: ActorPool, shipper: Shipper, address: str) -> None:
        self.ray, self.pool, self.shipper, self.address = ray, pool, shipper, address
        self.retries = 0
        self.sent = 0

    async def run(self, job: Job) -> JobResult:
        if job.writable:
            return JobResult("error", error="the Ray executor runs no job with writable directories (they would be "
                                            "written on another machine); run it with the local executor")
        try:
            trees = await anyio.to_thread.run_sync(self.shipper.trees, job)
        except (OSError, sources.TreeTooLarge) as error:
            return JobResult("error", error=f"the job's sources could not be shipped: {error}")
        lost: list[str] = []
        for _ in range(MAX_ATTEMPTS):
            actor = await self.pool.acquire(job.kind)
            if isinstance(actor, str):
                return JobResult("crash", error=actor + "".join(f"; before: {why}" for why in lost))
            paths = sources.PathMap.of({path: f"{actor.facts['sources']}/{digest}" for path, digest in trees.items()})
            node_job = replace(job, sys_path=tuple(paths.outward(p) for p in job.sys_path), payload=paths.outward(job.payload))
            shipped = [{"digest": d, "ref": [self.shipper.refs[d]]} for d in dict.fromkeys(trees.values())]
            ref = actor.handle.run.remote(node_job.to_json(), shipped)
            self.sent += 1
            try:
                reply = await ref
            except anyio.get_cancelled_exc_class():
                self.ray.cancel(ref)
                raise
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.ObjectLostError) as error:
                if isinstance(error, self.ray.exceptions.RayActorError):
                    self.pool.died(actor)
                lost.append(f"{actor.facts['host']} pid {actor.facts['pid']}: {_last_line(error)}")
                self.retries += 1
                continue
            except self.ray.exceptions.RayError as error:  # the actor method itself failed: a bug, reported
                return JobResult("error", error=f"the Ray actor failed to run the job: {error}")
            finally:
                with anyio.CancelScope(shield=True):
                    await self.pool.release(job.kind, actor)
            return await anyio.to_thread.run_sync(_finish, job, paths, reply)
        return JobResult("crash", error=f"the job lost its Ray actor {MAX_ATTEMPTS} times: " + "; ".join(lost))

    async def status(self) -> dict[str, Any]:
        executor = {**self.pool.status(), "address": self.address, "jobs_sent": self.sent, "retries": self.retries,
                    "bytes_shipped": self.shipper.bytes_shipped}
        levels = sorted({a["isolation"] for a in executor["actors"]})
        level = levels[0] if len(levels) == 1 else ",".join(levels) or "?"
        return {"executor": executor,
                "sandbox": {"isolation": level, "isolation_warning": isolation_warning(levels[0]) if levels else ""}}


def _finish(job: Job, paths: sources.PathMap, reply: dict[str, Any]) -> JobResult:
    """The node's result in the driver's paths, its output published at ``job.output``."""
    result = result_of(reply)
    result = replace(result, value=paths.back(result.value), error=paths.back(result.error),
                     output=paths.back(result.output))
    if not (job.output and result.ok and reply.get("output")):
        return result
    target = Path(job.output)
    staging = target.with_name(f".{target.name}.ray-{os.getpid()}-{time.monotonic_ns()}")
    try:
        sources.unpack(reply["output"], staging)
        publish(staging, target)
    except (OSError, ValueError) as error:
        shutil.rmtree(staging, ignore_errors=True)
        return JobResult("error", error=f"the job's output directory was not published: {error}",
                         output=result.output, seconds=result.seconds, worker=result.worker)
    return result


def _driver_facts() -> dict[str, Any]:
    from tern.sandbox import identity as keys

    return {"versions": keys.versions(tuple(dict.fromkeys(keys.TF_LIBRARIES + keys.JAX_LIBRARIES))),
            "tern": keys.tern_fingerprint()}


def _mismatch(facts: dict[str, Any], expected: dict[str, Any]) -> str:
    """Why results from this node would not be what the driver's cache keys say, or ""."""
    if facts["tern"] != expected["tern"]:
        return "it runs another tern (code or rules differ from the driver's)"
    theirs, ours = dict(map(tuple, facts["versions"])), dict(expected["versions"])
    if theirs != ours:
        differ = sorted(k for k in {*theirs, *ours} if theirs.get(k) != ours.get(k))
        return "library versions differ from the driver's: " + ", ".join(
            f"{k} {theirs.get(k, 'missing')} (driver {ours.get(k, 'missing')})" for k in differ)
    return ""


def _last_line(error: BaseException) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else type(error).__name__


_FORWARDED_ENV = ("TERN_SANDBOX",)  # settings the node's Sandbox reads from its environment


@asynccontextmanager
async def open_ray_runner(*, address: str | None = None, workers: int | None = None,
                          runtime_env: dict[str, Any] | None = None) -> AsyncIterator[RayRunner]:
    """A RayRunner on the cluster at ``address`` ("auto", "ray://host:10001", a GCS address),
    or on a local one-machine cluster started here when there is none (``address`` None and
    no ``RAY_ADDRESS``). A Ray already initialised in this process is used as it is."""
    ray = require_ray()
    started = False
    if not ray.is_initialized():
        options: dict[str, Any] = {"address": address, "namespace": NAMESPACE, "runtime_env": runtime_env or None,
                                   "log_to_driver": False}
        if not (address or os.environ.get("RAY_ADDRESS")):
            options["include_dashboard"] = False  # a one-machine cluster of our own: no web server
        try:
            ray.init(**options)  # in the calling thread: Ray installs its signal handlers only in the main one
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise RayUnavailable(f"no Ray cluster at {address or os.environ.get('RAY_ADDRESS') or 'a new local instance'}: {error}") from None
        started = True
    env = {name: os.environ[name] for name in _FORWARDED_ENV if name in os.environ}
    pool = ActorPool(ray, workers, env)
    runner = RayRunner(ray, pool, Shipper(ray), address or ray.get_runtime_context().gcs_address)
    try:
        yield runner
    finally:
        await pool.close()
        if started:
            ray.shutdown()
