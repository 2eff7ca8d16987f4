"""Does verification catch a translation bug? Plant typical ones and count.

Usage: python eval/bench_mutation.py [--limit N] [--fixtures a,b,...] [--seed S] [--operators o,p]
                                     [--json FILE] [--survivors EARLIER.json] [--project DIR]

Per fixture whose golden translation verifies today (``fixtures/expected/status.toml``
"pass", and its modules all equivalent or untested when verified here first), the
translation's package modules (not its tests, not ``_keras_compat.py``) are mutated one
bug at a time by the operators of ``mutation_operators.py``: operator and comparison swaps,
constants changed, off-by-one, activations swapped, ``training``/``deterministic`` inverted,
axes moved, an epsilon moved out of or into a square root, a term or residual dropped, an
output scaled by 1.0001, permutations and reshapes reordered, mean/sum swapped, defaults
changed, loop bounds shortened, ``jnp.where`` branches swapped, ``and``/``or``.

Mutants are sampled (``--limit``, stratified over operators, in a seeded order). The first
verification of each fixture runs every JAX job under a line tracer
(``tern.verify.line_trace``): a sampled mutant none of whose lines ran under the replays
and the translated tests cannot change anything they observe, and is counted apart as
*not reached* (never run). Each other one is written into a copy of the translation and
verified through the project's warm daemon, the recordings and unchanged modules' results
served from the cache:

* killed: some module's status became mismatch or error (which check: replay, train, tests);
* survived: every module kept its status: a bug verification let through.

Mutants examined by hand and judged unable to change behaviour (``mutation_equivalent.toml``,
each with its reason: a ``<`` against ``<=`` on a continuous random draw) are run and listed
apart, outside the rate.

The sample is drawn before reachability is known, so runs of two versions of tern compare
the same mutants. Prints the kill rate (killed / reached), per operator and per fixture, then every survivor.
A report, not a test: exits 0.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "eval"))

from mutation_operators import OPERATORS, apply, mutants  # noqa: E402

from tern.sandbox.jobs import Job, JobResult  # noqa: E402
from tern.engine.support_module import is_generated  # noqa: E402
from tern.verify import keys  # noqa: E402
from tern.verify.record import is_test_file  # noqa: E402

FIXTURES = ROOT / "fixtures" / "tf"
EXPECTED = ROOT / "fixtures" / "expected"
BAD = {"mismatch", "error"}


@dataclass
class Planted:
    fixture: str
    file: str  # relative to the package
    line: int
    last_line: int
    operator: str
    description: str
    source: str  # the mutated file
    outcome: str = ""  # killed / survived / not reached
    by: str = ""  # for a killed mutant: the first module that changed and how
    seconds: float = 0.0


@dataclass
class Baseline:
    statuses: dict[str, str]
    lines: dict[str, set[int]] = field(default_factory=dict)  # file under the package -> lines run


class TracingRunner:
    """Runs every JAX job under ``tern.verify.line_trace:traced`` and keeps the lines it ran."""

    def __init__(self, runner, package_dir: Path):
        self.runner, self.package_dir = runner, package_dir
        self.lines: dict[str, set[int]] = collections.defaultdict(set)

    async def run(self, job: Job) -> JobResult:
        if not job.kind.startswith("jax"):
            return await self.runner.run(job)
        wrapped = replace(job, task="tern.verify.line_trace:traced",
                          payload={"task": job.task, "payload": job.payload, "under": str(self.package_dir)})
        result = await self.runner.run(wrapped)
        if not result.ok:
            return result
        for name, numbers in result.value["lines"].items():
            self.lines[name].update(numbers)
        return replace(result, value=result.value["value"])


def candidate_fixtures(names: list[str]) -> list[str]:
    status = tomllib.loads((EXPECTED / "status.toml").read_text())["fixture"]
    expected = tomllib.loads((EXPECTED / "verify.toml").read_text())["module"]
    chosen = names or sorted(n for n, s in status.items() if s == "pass")
    return [n for n in chosen if all(v in {"equivalent", "untested"} for m, v in expected.items() if m.split(".")[0] == n)]


def source_files(package: Path) -> list[Path]:
    return [p for p in sorted(package.rglob("*.py"))
            if not is_test_file(p) and not is_generated(p) and "__pycache__" not in p.parts]


def all_mutants(name: str) -> list[Planted]:
    package = EXPECTED / name
    found = []
    for path in source_files(package):
        module, listed = mutants(path.read_text())
        for mutant in listed:
            found.append(Planted(name, str(path.relative_to(package)), *mutant.lines, mutant.operator,
                                 mutant.description, apply(module, mutant)))
    return found


def sample(planted: list[Planted], limit: int, seed: int) -> list[Planted]:
    """Round-robin over operators, each operator's mutants in a seeded order: a small
    ``--limit`` still sees every kind of bug."""
    rng = random.Random(seed)
    by_operator: dict[str, list[Planted]] = collections.defaultdict(list)
    for p in planted:
        by_operator[p.operator].append(p)
    for bucket in by_operator.values():
        rng.shuffle(bucket)
    chosen, order = [], sorted(by_operator)
    while len(chosen) < limit and any(by_operator.values()):
        for operator in order:
            if by_operator[operator] and len(chosen) < limit:
                chosen.append(by_operator[operator].pop())
    return chosen


async def verify(original: Path, translated: Path, runner, state: Path, config, fresh: bool = False):
    from tern.verify.cache import Cache
    from tern.verify.run import PackageVerifier

    cache = Cache(state)
    if fresh:
        cache.skip_kinds = {"replay", "tests", "train"}
    return await PackageVerifier(original, translated, runner=runner, cache=cache, config=config).verify()


def killed_by(baseline: dict[str, str], report) -> str:
    for row in report.rows:
        if row.status in BAD and baseline.get(row.module) not in BAD:
            problem = row.problems[0] if row.problems else ""
            checks = [k for k, n in (("replay", row.cases_total - row.cases_matched),
                                     ("train", row.train_total - row.train_matched),
                                     ("tests", row.tests_failed + row.tests_errors)) if n]
            return f"{row.module}: {row.status} ({', '.join(checks) or 'import'}) {problem[:100]}"
    return ""


async def run(args, names: list[str], project: Path) -> tuple[list[Planted], dict[str, Baseline]]:
    from tern.sandbox.client import open_runner
    from tern.verify.config import VerifyConfig

    state = project / ".tern"
    config = VerifyConfig(timeout=args.timeout)
    work = project / "work"
    baselines: dict[str, Baseline] = {}
    planted: list[Planted] = []
    async with open_runner(project, daemon="require", writable_roots=(state,)) as runner:
        for name in names:
            saved = project / "baselines" / f"{name}-{keys.digest(keys.tern_fingerprint(), keys.tree_hash(EXPECTED / name))[:16]}.json"
            if saved.is_file():  # this tern on this translation: statuses and lines run are known
                known = json.loads(saved.read_text())
                baselines[name] = Baseline(known["statuses"], {f: set(n) for f, n in known["lines"].items()})
                planted.extend(all_mutants(name))
                continue
            copy = work / "base" / name
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(EXPECTED / name, copy, ignore=shutil.ignore_patterns("__pycache__"))
            tracer = TracingRunner(runner, copy)
            # the default timeout: recording and traced jobs are slower than a mutant's jobs
            report = await verify(FIXTURES / name, copy, tracer, state, VerifyConfig(), fresh=True)
            statuses = {r.module: r.status for r in report.rows}
            if any(s in BAD for s in statuses.values()):
                problems = [p for r in report.rows for p in r.problems]
                print(f"{name}: left out, its translation does not verify here: {problems[:2]}", flush=True)
                continue
            baselines[name] = Baseline(statuses, dict(tracer.lines))
            saved.parent.mkdir(exist_ok=True)
            saved.write_text(json.dumps({"statuses": statuses, "lines": {f: sorted(n) for f, n in tracer.lines.items()}}))
            planted.extend(all_mutants(name))
        operators = set(args.operators.split(",")) if args.operators else set(OPERATORS)
        planted = [p for p in planted if p.operator in operators]
        chosen = sample(planted, args.limit, args.seed)  # the same sample whatever verify reaches: runs compare
        if args.survivors:  # again the mutants an earlier run let through, after a change to verify
            earlier = {_key(m) for m in json.loads(Path(args.survivors).read_text()) if m["outcome"] == "survived"}
            chosen = list({_key(vars(p)): p for p in reversed(planted) if _key(vars(p)) in earlier}.values())[::-1]
            # (two mutants alike in line and text, e.g. -0.05 and 0.05 on one line: the first stands for both)
        for p in chosen:
            ran = baselines[p.fixture].lines.get(p.file, set())
            if not any(line in ran for line in range(p.line, p.last_line + 1)):
                p.outcome = "not reached"
        unreached = [p for p in chosen if p.outcome]
        chosen = [p for p in chosen if not p.outcome]
        slots = anyio.Semaphore(args.concurrency)
        free = list(range(args.concurrency))
        done = 0

        async def one(p: Planted) -> None:
            nonlocal done
            async with slots:
                slot = free.pop()
                try:
                    copy = work / f"slot{slot}" / p.fixture
                    shutil.rmtree(copy, ignore_errors=True)
                    shutil.copytree(EXPECTED / p.fixture, copy, ignore=shutil.ignore_patterns("__pycache__"))
                    (copy / p.file).write_text(p.source)
                    started = time.perf_counter()
                    report = await verify(FIXTURES / p.fixture, copy, runner, state, config)
                    p.seconds = time.perf_counter() - started
                    p.by = killed_by(baselines[p.fixture].statuses, report)
                    p.outcome = "killed" if p.by else "survived"
                finally:
                    free.append(slot)
                done += 1
                if not args.quiet:
                    print(f"[{done}/{len(chosen)}] {p.outcome:8} {p.operator:12} {p.fixture}/{p.file}:{p.line} "
                          f"{p.description[:70]} ({p.seconds:.1f}s)", flush=True)

        async with anyio.create_task_group() as group:
            for p in chosen:
                group.start_soon(one, p)
    return chosen + unreached, baselines


def judged_equivalent() -> list[dict]:
    """The hand-examined mutants that cannot change behaviour (``mutation_equivalent.toml``)."""
    return tomllib.loads((ROOT / "eval" / "mutation_equivalent.toml").read_text())["mutant"]


def equivalence(p: Planted, judged: list[dict]) -> str:
    """Why ``p`` cannot change behaviour, if it was judged so by hand ("" otherwise)."""
    for entry in judged:
        if ((entry["fixture"], entry["file"], entry["line"]) == (p.fixture, p.file, p.line)
                and p.description.startswith(entry["description"])):
            return " ".join(entry["reason"].split())
    return ""


def rate(counter: collections.Counter) -> str:
    reached = counter["killed"] + counter["survived"]
    share = f"{100 * counter['killed'] / reached:5.1f}%" if reached else "    -"
    return f"{counter['killed']:4} {counter['survived']:4} {share}"


def print_report(results: list[Planted], baselines: dict[str, Baseline], seconds: float) -> None:
    judged = judged_equivalent()
    apart = [p for p in results if p.outcome in {"killed", "survived"} and equivalence(p, judged)]
    ran = [p for p in results if p.outcome in {"killed", "survived"} and not equivalence(p, judged)]
    unreached = [p for p in results if p.outcome == "not reached"]
    total = collections.Counter(p.outcome for p in ran)
    print(f"\nfixtures: {len(baselines)} ({', '.join(baselines)})")
    print(f"mutants sampled: {len(results)}; not reached by any replay or test (not run, not counted): {len(unreached)}; "
          f"run: {len(ran) + len(apart)}; judged equivalent by hand (run, not counted): {len(apart)}")
    print(f"kill rate: {rate(total).split()[-1]} ({total['killed']} killed, {total['survived']} survived); "
          f"{seconds:.0f} s, {sum(p.seconds for p in ran) / max(len(ran), 1):.1f} s per mutant")
    for title, key in (("operator", lambda p: p.operator), ("fixture", lambda p: p.fixture),
                       ("killed by", lambda p: _check(p.by) if p.outcome == "killed" else "-")):
        groups: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for p in ran:
            groups[key(p)][p.outcome] += 1
        print(f"\n{title:26} {'kill':>4} {'surv':>4} {'rate':>6}")
        for name in sorted(groups):
            print(f"{name:26} {rate(groups[name])}")
    survivors = [p for p in ran if p.outcome == "survived"]
    print(f"\nsurvivors ({len(survivors)}):")
    for p in sorted(survivors, key=lambda p: (p.fixture, p.file, p.line)):
        print(f"  {p.fixture}/{p.file}:{p.line} {p.operator}: {p.description}")
    if apart:
        print(f"\njudged equivalent by hand ({len(apart)}; eval/mutation_equivalent.toml):")
        for p in sorted(apart, key=lambda p: (p.fixture, p.file, p.line)):
            print(f"  {p.outcome:8} {p.fixture}/{p.file}:{p.line} {p.operator}: {p.description}\n"
                  f"           {equivalence(p, judged)}")


def _key(mutant: dict) -> tuple:
    return tuple(mutant[k] for k in ("fixture", "file", "line", "operator", "description"))


def _check(by: str) -> str:
    return by.split("(", 1)[1].split(")", 1)[0] if "(" in by else by


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=60, help="mutants to run (stratified over operators)")
    parser.add_argument("--fixtures", default="", help="comma-separated fixture names (default: every passing one)")
    parser.add_argument("--operators", default="", help=f"comma-separated, of: {', '.join(OPERATORS)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per sandbox job (a mutant may loop)")
    parser.add_argument("--project", default="/tmp/tern-bench-mutation", help="its .tern keeps recordings and results")
    parser.add_argument("--json", default="", help="write every mutant's outcome here")
    parser.add_argument("--survivors", default="", help="run only the survivors listed in an earlier run's --json")
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args()
    wanted = [n for n in args.fixtures.split(",") if n]
    if args.survivors and not wanted:
        wanted = sorted({m["fixture"] for m in json.loads(Path(args.survivors).read_text()) if m["outcome"] == "survived"})
    names = candidate_fixtures(wanted)
    project = Path(args.project)
    project.mkdir(parents=True, exist_ok=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'bench-mutation'\n")
    started = time.perf_counter()
    results, baselines = anyio.run(run, args, names, project)
    subprocess.run([sys.executable, "-m", "tern", "serve", "--stop", "--project", str(project)], capture_output=True)
    print_report(results, baselines, time.perf_counter() - started)
    if args.json:
        Path(args.json).write_text(json.dumps([{k: v for k, v in vars(p).items() if k != "source"} for p in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
