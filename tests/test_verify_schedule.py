"""The order in which a verify hands its jobs to the pool (tern/verify/run.py): a kind's jobs
get workers in the order they come, so the jobs that others wait on must come first."""

from __future__ import annotations

import anyio

from tern.sandbox.jobs import JobResult
from tern.verify.cache import Cache
from tern.verify.config import VerifyConfig
from tern.verify.run import PackageVerifier


class ScriptedRunner:
    """Answers every job at once: the recording has one case, for ``pkg.zeta``; a replay
    replays whatever it is given; the checks after a replay find nothing."""

    def __init__(self, recording: str):
        self.recording = recording
        self.jobs = []

    async def run(self, job):
        self.jobs.append(job)
        task = job.task.rpartition(":")[2]
        if task == "record_tests":
            value = {"dir": self.recording, "cases": [{"id": "c1", "target": "pkg.zeta:Layer"}],
                     "tests": {"exit": 0, "tests": {}}}
        elif task == "replay_module":
            value = {"import_error": "", "cases": [{"id": c["id"], "target": "pkg.zeta:Layer", "status": "equivalent"}
                                                   for c in job.payload["cases"]]}
        else:
            value = {"cases": [], "tests": {}}
        return JobResult("ok", value=value)


def _package(root, names) -> None:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    for name in names:
        (root / "pkg" / f"{name}.py").write_text("class Layer:\n    pass\n")


def test_a_replay_with_cases_goes_before_those_that_only_import_their_module(tmp_path):
    # pkg (the package itself) and pkg.alpha come first by name, and have no case
    _package(tmp_path / "tf", ["alpha", "zeta"])
    _package(tmp_path / "jax", ["alpha", "zeta"])
    runner = ScriptedRunner(str(tmp_path / "recording"))
    cache = Cache(tmp_path / ".tern")
    verifier = PackageVerifier(tmp_path / "tf" / "pkg", tmp_path / "jax" / "pkg", runner=runner, cache=cache,
                               config=VerifyConfig())
    anyio.run(verifier.verify)
    replays = [job.payload["module"] for job in runner.jobs if job.task.endswith(":replay_module")]
    assert replays[0] == "pkg.zeta" and sorted(replays[1:]) == ["pkg", "pkg.alpha"]
    cache.close()
