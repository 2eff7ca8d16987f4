"""What one verification costs: the naive loop beside tern warm and tern cached.

Usage: python eval/bench_verify.py [--limit N] [--names a,b,...] [--repeat N]

Per fixture package (those ``fixtures/expected/status.toml`` marks "pass"; the first
``--limit``, default 6, in name order), in one run:

(a) naive: a fresh ``python -m pytest`` on the original TF tests and another on the
    translated tests, as a user or an agent without tern would run them;
(b) tern warm: ``verify`` through the project's daemon, workers up, the TF recordings
    cached (made once per TF source version), after an edit of every translated module
    (a comment line appended to a copy of the translation): every JAX job runs again (the
    replays, the search and the translated tests, i.e. the part that changes while one
    edits a translation), and nothing the workers keep between jobs
    (``tern/verify/between_jobs.py``) is named by the edited code;
(c) tern cached: ``verify`` again with nothing changed since (b);
(d) tern after a one-line edit: a comment line appended to the package's largest module
    only; the cache decides what runs again (what imports the module), with the search;
(d') after another such edit, ``--no-search`` (``search_rounds = 0``): the quick check between edits.
(d) and (d') are timed ``--repeat`` times (default 3), each after an edit of its own, and
their medians reported: one sub-second sample moves by a third with the machine's load.
Beside (d), the seconds its jobs took in the workers, summed: the work an edit costs,
which the machine's cores share, so (d) cannot go below it divided by their number.

Prints per package and the median over packages, the ratios (a)/(b) and (a)/(d) (target, on (d): >= 100x)
and (c) in milliseconds (target <= 20 ms), peak memory of each side, and whether the
per-test outcomes of (b) and (c) equal those of (a). A report, not a test: exits 0.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tern.verify.junit import junit_outcomes  # noqa: E402

FIXTURES = ROOT / "fixtures" / "tf"
EXPECTED = ROOT / "fixtures" / "expected"
TARGET_WARM = 100.0
TARGET_CACHED_MS = 20.0


def naive(root: Path, package: str, block_tf: bool, scratch: Path) -> tuple[float, dict[str, str]]:
    """One fresh pytest process on the package's tests; (seconds, outcomes)."""
    junit = scratch / f"{package}-{'jax' if block_tf else 'tf'}.xml"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": str(root)}
    tests = [str(p) for p in sorted((root / package).rglob("*.py")) if p.stem.endswith("_test") or p.stem.startswith("test_")]
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root), "-c", os.devnull,
                    f"--junitxml={junit}", "-o", "junit_family=xunit1", *tests],
                   capture_output=True, text=True, cwd=root, env=env, timeout=600)
    seconds = time.perf_counter() - started
    return seconds, junit_outcomes(junit)[0] if junit.exists() else {}


def peak_children_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def tree_peak_mb(pid: int) -> float:
    """Sum of the peak RSS (VmHWM) of ``pid`` and its descendants."""
    total = 0.0
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1]) / 1024
        todo.extend(int(c) for c in children)
    return total


async def tern_runs(names: list[str], project: Path, repeat: int) -> dict:
    from tern.sandbox.client import open_runner
    from tern.verify.cache import Cache
    from tern.verify.config import VerifyConfig
    from tern.verify.run import PackageVerifier

    state = project / ".tern"
    results: dict = {}
    copies = project / "translations"
    for name in names:
        shutil.copytree(EXPECTED / name, copies / name)
    async with open_runner(project, daemon="require", writable_roots=(state,)) as runner:
        await runner.run(_echo("tf"))
        await runner.run(_echo("jax"))
        for name in names:  # prime: TF recordings, JAX compilation cache
            await PackageVerifier(FIXTURES / name, copies / name, runner=runner, cache=Cache(state), config=VerifyConfig()).verify()
        for name in names:
            _edit(copies / name, "warm")
            warm_cache = Cache(state)
            warm_cache.skip_kinds = {"replay", "tests", "search", "search-case", "inits", "inits-case"}
            started = time.perf_counter()
            warm = await PackageVerifier(FIXTURES / name, copies / name, runner=runner, cache=warm_cache, config=VerifyConfig()).verify()
            warm_s = time.perf_counter() - started
            started = time.perf_counter()
            cached = await PackageVerifier(FIXTURES / name, copies / name, runner=runner, cache=Cache(state), config=VerifyConfig()).verify()
            cached_s = time.perf_counter() - started
            ones, quicks, works = [], [], []
            for attempt in range(repeat):  # each after its own edit; the median is reported
                edited = _edit(copies / name, f"one line {attempt}", every=False)
                verifier = PackageVerifier(FIXTURES / name, copies / name, runner=runner, cache=Cache(state),
                                           config=VerifyConfig())
                started = time.perf_counter()
                await verifier.verify()
                ones.append(time.perf_counter() - started)
                works.append(sum(job["seconds"] for job in verifier.jobs if not job["cached"]))
                _edit(copies / name, f"quick {attempt}", every=False)
                started = time.perf_counter()
                await PackageVerifier(FIXTURES / name, copies / name, runner=runner, cache=Cache(state),
                                      config=VerifyConfig(search_rounds=0)).verify()
                quicks.append(time.perf_counter() - started)
            one_s, quick_s = statistics.median(ones), statistics.median(quicks)
            results[name] = {"warm": (warm_s, warm), "one": (one_s, edited), "quick": quick_s, "cached": (cached_s, cached),
                             "work": statistics.median(works)}
        status = await runner.status()
    results["_status"] = status
    return results


def _edit(package: Path, mark: str, every: bool = True) -> str:
    """A comment line appended to every translated module but the tests (``every``: each
    module's content hash changes), or to the largest one only (a one-line edit of the
    package's main code: what imports it is checked again, the rest stays cached). Returns
    the module edited, or "every"."""
    code = [p for p in sorted(package.rglob("*.py")) if not (p.stem.endswith("_test") or p.stem.startswith("test_"))]
    edited = code if every else [max(code, key=lambda p: (p.stat().st_size, str(p)))]
    for path in edited:
        path.write_text(path.read_text() + f"# edited ({mark})\n")
    return "every" if every else str(edited[0].relative_to(package))


def _echo(kind: str):
    from tern.sandbox.jobs import Job

    return Job(kind=kind, task="tern.sandbox.tasks:echo", payload={})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=6)
    parser.add_argument("--names", default="")
    parser.add_argument("--repeat", type=int, default=3, help="one-line edits timed per package (median)")
    args = parser.parse_args()
    status = tomllib.loads((EXPECTED / "status.toml").read_text())["fixture"]
    names = args.names.split(",") if args.names else [n for n in sorted(status) if status[n] == "pass"][: args.limit]
    with tempfile.TemporaryDirectory(prefix="tern-bench-verify-") as tmp:
        project = Path(tmp)
        (project / "pyproject.toml").write_text("[project]\nname = 'bench'\n")
        scratch = project / "junit"
        scratch.mkdir()
        print(f"packages: {', '.join(names)}")
        naive_rows = {}
        for name in names:
            tf_s, tf_out = naive(FIXTURES, name, False, scratch)
            jax_s, jax_out = naive(EXPECTED, name, True, scratch)
            naive_rows[name] = (tf_s + jax_s, tf_out, jax_out)
        naive_peak = peak_children_mb()
        runs = anyio.run(tern_runs, names, project, args.repeat)
        tern_status = runs.pop("_status")
        server_pid = tern_status.get("pid")
        tern_peak = tree_peak_mb(server_pid) if server_pid else float("nan")
        subprocess.run([sys.executable, "-m", "tern", "serve", "--stop", "--project", str(project)], capture_output=True)
    print("naive/: the naive loop's time over tern's; 'every': every translated module edited, each job run again; "
          "'one line': one line of the largest module edited, the cache deciding what runs again")
    print("'one work s': the seconds the jobs a one-line edit ran again took in the workers, summed (the machine's "
          "cores share them: 'one s' cannot go below it divided by their number)")
    print(f"{'package':26} {'naive s':>8} {'every s':>8} {'one s':>7} {'one work s':>10} {'cached ms':>10} {'/every':>8} "
          f"{'/one':>8} {'/one, no search':>15}  same results  every: worker s per phase")
    ratios, one_ratios, quick_ratios, cached_ms = [], [], [], []
    for name in names:
        total, tf_out, jax_out = naive_rows[name]
        warm_s, warm = runs[name]["warm"]
        one_s, _edited = runs[name]["one"]
        cached_s, cached = runs[name]["cached"]
        same = _same(tf_out, jax_out, warm) and _same(tf_out, jax_out, cached)
        ratios.append(total / warm_s)
        one_ratios.append(total / one_s)
        quick_ratios.append(total / runs[name]["quick"])
        cached_ms.append(cached_s * 1000)
        phases = " ".join(f"{k} {v:.2f}" for k, v in warm.phases.items() if v)
        print(f"{name:26} {total:8.2f} {warm_s:8.3f} {one_s:7.3f} {runs[name]['work']:10.3f} {cached_s * 1000:10.1f} {ratios[-1]:7.1f}x "
              f"{one_ratios[-1]:7.1f}x {quick_ratios[-1]:14.1f}x  {str(same):12}  {phases}")
    searched = sum(1 for name in names for row in runs[name]["warm"][1].rows for case in row.cases if case.get("search"))
    search_s = sum(runs[name]["warm"][1].phases.get("search", 0.0) for name in names)
    if searched:
        rounds = sum(case["search"].get("rounds", 0) + 1 for name in names for row in runs[name]["warm"][1].rows
                     for case in row.cases if case.get("search"))
        reused = sum(case["search"].get("reused", 0) for name in names for row in runs[name]["warm"][1].rows
                     for case in row.cases if case.get("search"))
        print(f"search beyond the probes (warm, after the edit): {searched} cases, {search_s:.2f} s in the workers, "
              f"{search_s / searched * 1000:.0f} ms per case; JAX rounds that reused the translation built in "
              f"round 0: {reused} of {rounds}")
    median_one, median_cached = statistics.median(one_ratios), statistics.median(cached_ms)
    print(f"median: naive/warm after a one-line edit {median_one:.1f}x (target >= {TARGET_WARM:g}x: "
          f"{'met' if median_one >= TARGET_WARM else 'NOT met'}); every module edited {statistics.median(ratios):.1f}x; "
          f"cached {median_cached:.1f} ms per package (target <= {TARGET_CACHED_MS:g} ms: {'met' if median_cached <= TARGET_CACHED_MS else 'NOT met'})")
    print(f"median with --no-search after a one-line edit (the search skipped, as between edits): naive/warm "
          f"{statistics.median(quick_ratios):.1f}x")
    print(f"peak memory: naive {naive_peak:.0f} MB (largest single pytest process); tern {tern_peak:.0f} MB (daemon and all its workers)")
    return 0


def _same(tf_out: dict, jax_out: dict, report) -> bool:
    """Same outcomes: the original tests tern ran equal the naive TF run, and the
    translated tests that passed under tern are those that passed naively."""
    originals = {k.split("::")[-1]: v == "passed" for k, v in report.original_tests.items() if v != "skipped"}
    naive_tf = {k.split("::")[-1]: v == "passed" for k, v in tf_out.items() if v != "skipped"}
    passed_naive = sum(1 for v in jax_out.values() if v == "passed")
    passed_tern = sum(r.tests_passed for r in report.rows)
    return originals == naive_tf and passed_naive == passed_tern


if __name__ == "__main__":
    sys.exit(main())
