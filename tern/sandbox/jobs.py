"""The sandbox's contract: a job goes in, a result value comes out.

A job names a *task*: a function ``fn(payload: dict, scratch: pathlib.Path) -> dict``
given as ``"module:function"`` and run inside a warm worker of the right kind ("tf":
TensorFlow imported once; "jax": jax and flax imported once, TensorFlow unimportable;
"jax_tfdata": jax and flax, and TensorFlow for tf.data, Keras unimportable).
Payloads and results are JSON values only (no pickle: a worker runs untrusted code and
must not be able to run code in the tern process through its answer). Arrays travel
as ``.npz`` files in ``writable`` directories, loaded with ``allow_pickle=False``.

Files a job makes for later jobs (recordings) are not written into tern's state by the
job: it writes them under ``scratch / OUTPUT``, and when it ends "ok" the pool renames
that directory to ``Job.output`` (checked: directories and regular files only). Later jobs
read it there, read-only.

Outcomes are values, not exceptions: every job ends as a ``JobResult`` whose ``cause``
says how it ended.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Kind = Literal["tf", "tf_keras", "jax", "jax_tfdata"]  # tf_keras: TensorFlow with legacy Keras 2 (``[tool.tern] keras``)

# How a job ended. "ok": the task returned; "error": the task raised (traceback in
# ``error``); the rest are ends the pool imposed, after which the worker is replaced.
Cause = Literal["ok", "error", "timeout", "cpu", "memory", "crash", "cancelled"]

OUTPUT = "output"  # under a job's scratch directory: what the pool moves to ``Job.output``


@dataclass(frozen=True)
class Job:
    kind: Kind
    task: str  # "package.module:function"; only tern's own tasks (see worker.TASK_PREFIXES)
    payload: dict[str, Any] = field(default_factory=dict)
    sys_path: tuple[str, ...] = ()  # prepended for this job; modules loaded from here are purged after it
    writable: tuple[str, ...] = ()  # directories the job may write besides its scratch directory
    timeout: float = 120.0  # wall seconds
    cpu_seconds: float = 120.0  # CPU time (all threads)
    memory_mb: int = 4096  # resident set size of the worker while the job runs
    output: str = ""  # absolute path the pool renames the job's ``scratch / OUTPUT`` to, if the job ends "ok"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Job":
        data = json.loads(text)
        data["sys_path"] = tuple(data.get("sys_path", ()))
        data["writable"] = tuple(data.get("writable", ()))
        return cls(**data)


@dataclass(frozen=True)
class JobResult:
    cause: Cause
    value: dict[str, Any] | None = None  # the task's return value when cause == "ok"
    error: str = ""  # traceback or a one-line description of the imposed end
    output: str = ""  # the tail of what the job printed (stdout and stderr)
    seconds: float = 0.0  # wall time in the worker
    worker: int = 0  # pid of the worker that ran it

    @property
    def ok(self) -> bool:
        return self.cause == "ok"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "JobResult":
        return cls(**json.loads(text))
