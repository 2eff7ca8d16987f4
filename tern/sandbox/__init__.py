"""Run TensorFlow and JAX jobs in warm, isolated worker processes (see ``pool.Sandbox``)."""

from tern.sandbox.isolation import LEVELS, available, detect
from tern.sandbox.jobs import Cause, Job, JobResult, Kind
from tern.sandbox.pool import Sandbox

__all__ = ["LEVELS", "Cause", "Job", "JobResult", "Kind", "Sandbox", "available", "detect"]
