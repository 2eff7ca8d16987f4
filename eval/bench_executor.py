"""The same suite with the local pool and with Ray on this machine, side by side.

Usage: python eval/bench_executor.py [--suite eval/suites/fixtures.toml] [--jobs N] [--rounds R]

Runs ``tern eval SUITE --no-cache --daemon never`` in a fresh project each time (so each
run starts cold, with an empty cache): ``--executor local``, then ``--executor ray`` with
no address, so tern starts a one-machine Ray cluster itself and its start-up is counted;
``--rounds`` alternates the pair R times (the machine's load drifts; the load average is
printed beside each run) and compares medians. Prints the wall times, Ray's overhead over local (target <= 25%), whether every
case and module ended with the same status and figures, and the measured costs that
docs/ray.md's estimate for a cluster starts from: worker seconds per package and per job,
migration seconds per package, and Ray's overhead per job. A report, not a test: exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_OVERHEAD = 0.25
CASE_FIGURES = ("status", "translated", "tests_passed", "tests_total", "replay_matched", "replay_total", "max_abs",
                "max_rel", "training", "original_tests")


def run_eval(suite: Path, executor: str, jobs: int, scratch: Path) -> tuple[float, dict]:
    project = scratch / f"{executor}-{len(list(scratch.iterdir()))}"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'bench-executor'\n")
    report = project / "eval.json"
    command = [sys.executable, "-m", "tern", "eval", str(suite), "--project", str(project), "--no-cache",
               "--daemon", "never", "--executor", executor, "--jobs", str(jobs), "--json", str(report), "--no-llm"]
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=project, timeout=3600,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    seconds = time.perf_counter() - started
    if not report.exists():
        raise SystemExit(f"tern eval --executor {executor} wrote no report (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds, json.loads(report.read_text())


def outcomes(report: dict) -> dict:
    """Per case its figures and per module its status and numbers: what must not depend on the executor."""
    found = {}
    for case in report["cases"]:
        found[case["id"]] = {k: case.get(k) for k in CASE_FIGURES}
        for module in case.get("modules", []):
            found[f"{case['id']}::{module.get('module')}"] = {k: v for k, v in module.items() if k not in ("cached", "seconds")}
    return found


def differences(a: dict, b: dict) -> list[str]:
    return [f"{key}: local {a.get(key)} != ray {b.get(key)}" for key in sorted({*a, *b}) if a.get(key) != b.get(key)]


def worker_seconds(report: dict) -> float:
    """Seconds spent inside sandbox workers (record, replay, train, tests), summed over cases."""
    return sum(v for case in report["cases"] for k, v in case.get("phases", {}).items() if k != "migrate")


async def round_trips(count: int, scratch: Path) -> dict[str, float]:
    """Median seconds of one ``echo`` job (a package-sized tree on its sys_path) through a warm
    worker: the local Sandbox, then a Ray actor on a one-machine cluster started here, whose
    start-up and first (cold) job are timed too. What the executor itself adds per job."""
    import ray

    from tern.sandbox.jobs import Job
    from tern.sandbox.pool import Sandbox
    from tern.sandbox.ray_runner import open_ray_runner

    job = Job(kind="jax", task="tern.sandbox.tasks:echo", payload={"n": 1}, sys_path=(str(ROOT / "fixtures" / "tf" / "custom_dense"),))

    async def timed(run) -> list[float]:
        times = []
        for _ in range(count):
            started = time.perf_counter()
            result = await run(job)
            assert result.ok, result.error
            times.append(time.perf_counter() - started)
        return times

    async with Sandbox(scratch / "local-state", workers=1) as sandbox:
        await sandbox.run(job)  # warm
        local = await timed(sandbox.run)
    started = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    init = time.perf_counter() - started
    try:
        async with open_ray_runner(workers=1) as runner:
            started = time.perf_counter()
            await runner.run(job)  # the actor starts, then its worker
            first = time.perf_counter() - started
            remote = await timed(runner.run)
    finally:
        ray.shutdown()
    return {"local": statistics.median(local), "ray": statistics.median(remote), "init": init, "first": first}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path, default=ROOT / "eval" / "suites" / "fixtures.toml")
    parser.add_argument("--jobs", type=int, default=2, help="cases migrated in parallel (both runs)")
    parser.add_argument("--rounds", type=int, default=1, help="local/ray pairs, alternated")
    parser.add_argument("--round-trips", type=int, default=50, help="echo jobs timed through each executor, warm")
    parser.add_argument("--no-suite", action="store_true", help="only the round trips")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tern-bench-executor-") as tmp:
        import anyio

        trips = anyio.run(round_trips, args.round_trips, Path(tmp))
    print(f"one warm job, median of {args.round_trips}: local {trips['local'] * 1000:.1f} ms, ray {trips['ray'] * 1000:.1f} ms "
          f"(+{(trips['ray'] - trips['local']) * 1000:.1f} ms per job); ray.init {trips['init']:.1f} s, "
          f"first job on a new actor {trips['first']:.1f} s", flush=True)
    if args.no_suite:
        return 0
    walls: dict[str, list[float]] = {"local": [], "ray": []}
    reports: dict[str, list[dict]] = {"local": [], "ray": []}
    with tempfile.TemporaryDirectory(prefix="tern-bench-executor-") as tmp:
        for round_ in range(args.rounds):
            for executor in ("local", "ray"):
                load = os.getloadavg()[0]
                seconds, report = run_eval(args.suite.resolve(), executor, args.jobs, Path(tmp))
                walls[executor].append(seconds)
                reports[executor].append(report)
                print(f"round {round_ + 1} {executor:5} {seconds:8.1f} s wall (load average {load:.1f} before, "
                      f"{os.getloadavg()[0]:.1f} after)", flush=True)
    local_s, ray_s = statistics.median(walls["local"]), statistics.median(walls["ray"])
    local, ray = reports["local"][0], reports["ray"][0]
    cases = len(local["cases"])
    jobs = local["run"].get("jobs_run", 0)
    overhead = ray_s / local_s - 1
    diff = [line for other in reports["ray"] + reports["local"][1:] for line in differences(outcomes(local), outcomes(other))]
    work = worker_seconds(local)
    migrate = sum(case.get("phases", {}).get("migrate", 0.0) for case in local["cases"])
    executor = ray["run"].get("executor", {})
    print(f"suite {args.suite.name}: {cases} cases, {jobs} sandbox jobs (ray sent {executor.get('jobs_sent', '?')}, "
          f"{executor.get('retries', '?')} retried, {executor.get('bytes_shipped', 0) / 1e6:.1f} MB of sources shipped)")
    print(f"local pool   {local_s:8.1f} s wall (median of {len(walls['local'])})")
    print(f"ray (local)  {ray_s:8.1f} s wall (median of {len(walls['ray'])})")
    print(f"overhead     {overhead:+8.1%} (target <= {TARGET_OVERHEAD:.0%}: {'met' if overhead <= TARGET_OVERHEAD else 'NOT met'})")
    print(f"same statuses and figures: {'yes' if not diff else 'NO'} ({len(outcomes(local))} cases and modules, "
          f"{len(reports['ray']) + len(reports['local']) - 1} runs compared with the first local one)")
    for line in diff[:20]:
        print(f"  {line}")
    print(f"measured: {work:.1f} worker-s in all = {work / cases:.2f} worker-s per package, "
          f"{work / max(jobs, 1):.2f} per job, {jobs / cases:.2f} jobs per package; "
          f"migration {migrate / cases:.2f} s per package; Ray's overhead {(ray_s - local_s) / max(jobs, 1):.3f} s per job "
          f"on one machine (start-up included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
