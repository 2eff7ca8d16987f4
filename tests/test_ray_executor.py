"""The Ray executor on a real local Ray cluster (2 CPUs, started once for this file).

Every Ray test lives here: ``pytest -n 2 --dist loadfile`` gives this file one worker, so
one cluster serves them all. ``tern verify`` runs as a user runs it, in a subprocess that
joins the cluster with ``--address``, on two fixture translations (one equivalent, one residue
whose modules end "error"): with the local pool in one project and with Ray in another,
side by side, while this process kills a JAX actor in the middle of its jobs; then again
with Ray and with the local pool on the Ray project's cache.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
import ray

from tern.sandbox import sources
from tern.sandbox.executor import ExecutorError, load_executor
from tern.sandbox.jobs import Job
from tern.sandbox.ray_runner import NAMESPACE, open_ray_runner

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("custom_dense", "beyond_dynamic_shapes")
POLL = 0.05


@pytest.fixture(scope="session")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, namespace="tern-tests", log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def make_project(root: Path) -> Path:
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'ray-tests'\n")
    for name in PACKAGES:
        shutil.copytree(ROOT / "fixtures" / "tf" / name, root / "tf" / name, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(ROOT / "fixtures" / "expected" / name, root / "out" / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def verify_command(project: Path, report: str, *extra: str) -> list[str]:
    # one worker per kind: two packages need no more, and each TF or JAX import costs seconds of CPU
    return [sys.executable, "-m", "tern", "verify", "out", "--original", "tf", "--daemon", "never", "--workers", "1",
            "--json", str(project / report), *extra]


def run(project: Path, report: str, *extra: str) -> dict:
    proc = subprocess.run(verify_command(project, report, *extra), cwd=project, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "COLUMNS": "200"})
    assert (project / report).exists(), proc.stdout + proc.stderr
    return json.loads((project / report).read_text())


def figures(report: dict) -> dict:
    """Per module what a reader compares: status and every count and error figure."""
    keep = ("status", "tests_passed", "tests_failed", "tests_errors", "tests_total", "cases_matched", "cases_total",
            "train_matched", "train_total", "max_abs", "max_rel", "covered_by")
    out = {row["module"]: {k: row.get(k) for k in keep} for p in report["packages"] for row in p["rows"]}
    out.update({p["package"]: {"record_error": p.get("record_error"), "original_tests": p.get("original_tests")}
                for p in report["packages"]})
    return out


def jax_actor_in_a_job(deadline: float):
    """A JAX actor of the verify run that has a job in flight (polled until one has)."""
    while time.monotonic() < deadline:
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry["namespace"] == NAMESPACE and entry["name"].startswith("tern-jax-"):
                try:
                    actor = ray.get_actor(entry["name"], namespace=NAMESPACE)
                    if ray.get(actor.status.remote(), timeout=30)["in_flight"]:
                        return actor
                except (ValueError, ray.exceptions.RayError):
                    continue
        time.sleep(POLL)
    raise AssertionError("no JAX actor ran a job")


@pytest.fixture(scope="module")
def runs(cluster, tmp_path_factory):
    """The local and the Ray run side by side (each its own project, so its own cache), a
    JAX actor killed mid-job in the Ray one; then Ray again and local again on the Ray cache."""
    base = tmp_path_factory.mktemp("ray")
    local_project, ray_project = make_project(base / "local"), make_project(base / "ray")
    procs = [subprocess.Popen(verify_command(local_project, "local.json", "--no-cache", "--executor", "local"),
                              cwd=local_project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True),
             subprocess.Popen(verify_command(ray_project, "ray.json", "--no-cache", "--executor", "ray", "--address", cluster),
                              cwd=ray_project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)]
    try:
        ray.kill(jax_actor_in_a_job(time.monotonic() + 300), no_restart=True)
        outputs = [proc.communicate(timeout=600)[0] for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    for project, report, output in ((local_project, "local.json", outputs[0]), (ray_project, "ray.json", outputs[1])):
        assert (project / report).exists(), output
    local, killed = (json.loads((p / r).read_text()) for p, r in ((local_project, "local.json"), (ray_project, "ray.json")))
    again = run(ray_project, "again.json", "--executor", "ray", "--address", cluster)
    local_on_ray_cache = run(ray_project, "local-again.json", "--executor", "local")
    return {"local": local, "ray": killed, "again": again, "local_on_ray_cache": local_on_ray_cache}


def test_ray_gives_the_local_pools_statuses_and_figures_despite_a_killed_actor(runs):
    assert figures(runs["ray"]) == figures(runs["local"])
    statuses = {row["status"] for p in runs["local"]["packages"] for row in p["rows"]}
    assert {"equivalent", "error"} <= statuses  # both kinds of end are compared, not only successes


def test_the_killed_actors_job_was_retried_on_another(runs):
    executor = runs["ray"]["run"]["executor"]
    assert executor["lost_actors"] == 1 and executor["retries"] >= 1
    ran = sum(p["jobs"] - p["cached_jobs"] for p in runs["ray"]["packages"])
    assert executor["jobs_sent"] == ran + executor["retries"]  # every job sent once, and again once per loss
    jax = [a for a in executor["actors"] if a["kind"] == "jax"]
    assert [a["dead"] for a in jax] == [True, False]  # the dead one and its replacement


def test_one_cache_on_the_driver_a_second_run_sends_nothing(runs):
    again = runs["again"]["run"]
    assert again["executor"]["jobs_sent"] == 0 and again["cache_misses"] == 0 and again["cache_hits"] > 0
    assert figures(runs["again"]) == figures(runs["local"])
    assert runs["local_on_ray_cache"]["run"]["cache_misses"] == 0  # either executor reads what the other wrote


@pytest.fixture(scope="module")
def faults(cluster, tmp_path_factory):
    """One runner: a job that publishes output, a job cancelled mid-run, a job that kills its worker."""
    out = tmp_path_factory.mktemp("faults") / "published"

    async def scenario() -> dict:
        async with open_ray_runner(workers=1) as runner:
            made = await runner.run(Job(kind="jax", task="tern.sandbox.tasks:run_code", output=str(out),
                                        payload={"code": "(scratch / 'output').mkdir()\n(scratch / 'output' / 'f.txt').write_text('hi')\nresult = 1"}))
            with anyio.CancelScope() as scope:
                async def cancel_when_running() -> None:
                    while not (actors := [a for g in runner.pool.kinds.values() for a in g.actors if a.busy]):
                        await anyio.sleep(POLL)
                    while not _running(await actors[0].handle.status.remote()):  # in its worker, not starting one
                        await anyio.sleep(POLL)
                    scope.cancel()

                async with anyio.create_task_group() as group:
                    group.start_soon(cancel_when_running)
                    await runner.run(Job(kind="jax", task="tern.sandbox.tasks:run_code", timeout=600, cpu_seconds=600,
                                         payload={"code": "import time\ntime.sleep(600)"}))
            actor = runner.pool.kinds["jax"].actors[0].handle
            while (await actor.status.remote())["in_flight"]:
                await anyio.sleep(POLL)
            crash = await runner.run(Job(kind="jax", task="tern.sandbox.tasks:run_code",
                                         payload={"code": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"}))
            pool = (await actor.status.remote())["sandbox"]["kinds"]["jax"]
            return {"crash": crash, "pool": pool, "made": made, "status": await runner.status()}

    return anyio.run(scenario) | {"out": out}


def _running(status: dict) -> int:
    return (status["sandbox"] or {}).get("kinds", {}).get("jax", {}).get("busy", 0)


def test_a_job_that_kills_its_worker_ends_crash_as_locally_and_is_not_retried(faults):
    assert faults["crash"].cause == "crash" and faults["crash"].error == "worker died: SIGKILL"
    assert faults["status"]["executor"]["retries"] == 0 and faults["status"]["executor"]["lost_actors"] == 0


def test_cancelling_a_run_cancels_the_job_on_the_node(faults):
    # the killed worker and the cancelled job's worker were both retired; nothing is left running
    assert faults["pool"]["restarts"] == 2 and faults["pool"]["busy"] == 0


def test_a_jobs_output_comes_back_and_is_published_on_the_driver(faults):
    assert faults["made"].cause == "ok", faults["made"].error
    assert (faults["out"] / "f.txt").read_text() == "hi"


# -- without a cluster -------------------------------------------------------------------


def test_executor_ray_without_ray_installed_is_a_clear_usage_error(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    code = "import sys; sys.modules['ray'] = None; from tern.cli import app; app()"
    proc = subprocess.run([sys.executable, "-c", code, "verify", "pkg", "--original", "pkg", "--executor", "ray"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "pip install 'tern[ray]'" in proc.stderr


def test_executor_settings_come_from_pyproject_and_the_command_line_wins(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.tern.executor]\nkind = "ray"\naddress = "auto"\nworkers = 3\n')
    assert load_executor(tmp_path).kind == "ray" and load_executor(tmp_path).workers == 3
    assert load_executor(tmp_path, "local").kind == "local"
    assert load_executor(tmp_path, None, "10.0.0.1:6379").address == "10.0.0.1:6379"
    (tmp_path / "pyproject.toml").write_text('[tool.tern.executor]\nkind = "dask"\n')
    with pytest.raises(ExecutorError, match="executor must be one of"):
        load_executor(tmp_path)


def test_a_tree_has_one_digest_wherever_it_lies_and_unpacks_once(tmp_path):
    for where in ("a", "b"):
        (tmp_path / where / "pkg" / "__pycache__").mkdir(parents=True)
        (tmp_path / where / "pkg" / "m.py").write_text("x = 1\n")
        (tmp_path / where / "pkg" / "__pycache__" / "m.pyc").write_bytes(os.urandom(8))
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "pkg").symlink_to(tmp_path / "b" / "pkg")  # tern's link roots: followed
    digest, data = sources.pack(tmp_path / "a")
    assert sources.pack(tmp_path / "link")[0] == digest
    (tmp_path / "b" / "pkg" / "m.py").write_text("x = 2\n")
    assert sources.pack(tmp_path / "b")[0] != digest
    target = sources.unpack_once(lambda: data, tmp_path / "store", digest)
    assert (target / "pkg" / "m.py").read_text() == "x = 1\n" and not (target / "pkg" / "__pycache__").exists()
    assert sources.unpack_once(lambda: pytest.fail("unpacked twice"), tmp_path / "store", digest) == target


def test_paths_go_out_whole_and_come_back_inside_text():
    paths = sources.PathMap.of({"/p/.tern/links/ab": "/n/sources/1", "/p/.tern/recordings/k": "/n/sources/2"})
    job = {"root": "/p/.tern/links/ab", "cases": [{"dir": "/p/.tern/recordings/k"}], "other": "/p/.tern/links/abc"}
    assert paths.outward(job) == {"root": "/n/sources/1", "cases": [{"dir": "/n/sources/2"}], "other": "/p/.tern/links/abc"}
    assert paths.back('File "/n/sources/1/pkg/m.py", line 3') == 'File "/p/.tern/links/ab/pkg/m.py", line 3'


WRITER = """
import sys, time
from pathlib import Path
from tern.verify.cache import Cache
Path(sys.argv[1] + "." + sys.argv[2]).touch()  # imported: ready
while not Path(sys.argv[1] + ".go").exists():  # both open the new store at the same moment
    time.sleep(0.001)
cache = Cache(Path(sys.argv[1]))
for i in range(300):
    cache.put(f"{sys.argv[2]}-{i}", "tests", {"i": i, "pad": "x" * 2000})
    assert cache.get(f"{sys.argv[2]}-{i}", "tests")["i"] == i
cache.close()
"""


def test_two_drivers_writing_one_projects_cache_at_once_lose_and_damage_nothing(tmp_path):
    state = tmp_path / ".tern"
    names = ("driver-a", "driver-b")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(state), name], stderr=subprocess.PIPE, text=True)
             for name in names]
    while not all(Path(f"{state}.{name}").exists() for name in names) and all(p.poll() is None for p in procs):
        time.sleep(POLL)
    Path(f"{state}.go").touch()
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    db = sqlite3.connect(state / "cache.sqlite")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 600
    assert not list(state.glob("cache.sqlite.damaged-*"))
