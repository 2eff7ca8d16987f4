"""What one turn of an agent's loop costs from the caller's side: the CLI and ``tern mcp``
beside the naive loop.

Usage: python eval/bench_tool_loop.py [--names custom_dense,...] [--repeat N]

Per fixture package (default: custom_dense), in one run, wall time as the caller sees it:

(a) naive: a fresh ``pytest`` of the translated tests, and a fresh
    ``tern verify --daemon never --no-cache`` (workers started by the command, nothing kept);
(b) CLI ``tern verify``: cold (no daemon, empty cache), warm after an edit (a comment
    appended to the package's first module, so its replays and tests run again in warm
    workers) and cached (nothing changed), the last also through the full typer CLI as
    it was before the thin client (``python -c 'from tern.cli import app; app()'``);
(c) MCP: the ``verify`` tool of one ``tern mcp`` session (real ``mcp`` client, stdio), cold
    (daemon stopped, cache cleared), warm after an edit and cached; and ``translate`` of one
    file beside ``tern migrate --dry-run`` of it;
(d) ``tern migrate`` of the package after a one-line edit to one source file, through the
    daemon and with ``--daemon never`` (the CLI's own process).

Warm and cached figures are medians of ``--repeat`` runs (default 5). Prints the ratios of
the naive loop to each, and checks the targets of issue 20: cached CLI verify <= 100 ms,
MCP within 20 ms of the CLI, a one-file migrate through the daemon <= 150 ms. A report, not a test: exits 0.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "tf"
TARGET_CACHED_MS = 100.0
TARGET_MCP_GAP_MS = 20.0
TARGET_MIGRATE_MS = 150.0  # one changed file of a package, through the daemon
FULL_CLI = ["-c", "import sys; from tern.cli import app; app(sys.argv[1:], prog_name='tern')"]


def tern_command() -> list[str]:
    """The ``tern`` console script an agent's shell runs (beside this interpreter), else ``-m tern``."""
    script = Path(sys.executable).with_name("tern")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tern"]


def timed(command: list[str], cwd: Path, env: dict | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=1800, env=env)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return seconds


class Package:
    """A project holding one fixture package and its translation, and the ways to touch it."""

    def __init__(self, name: str, project: Path) -> None:
        self.name, self.project = name, project
        shutil.copytree(FIXTURES / name, project / "src" / name)
        self.out = project / "out" / name
        subprocess.run([*tern_command(), "migrate", f"src/{name}", "--out", f"out/{name}", "-q"], cwd=project, check=True)
        self.module = next(p for p in sorted(self.out.glob("*.py")) if p.name not in ("__init__.py", "_keras_compat.py")
                           and not p.stem.endswith("_test") and not p.stem.startswith("test_"))
        self.edits = 0

    def edit(self) -> None:
        self.edits += 1
        with self.module.open("a") as f:
            f.write(f"\n# edit {self.edits}\n")

    def cli(self, *extra: str, full: bool = False) -> float:
        command = [sys.executable, *FULL_CLI] if full else tern_command()
        return timed([*command, "verify", f"out/{self.name}", *extra], self.project)

    def stop_and_clear(self) -> None:
        subprocess.run([*tern_command(), "serve", "--stop", "--project", str(self.project)], capture_output=True, timeout=120)
        subprocess.run([*tern_command(), "cache", "clear", "--project", str(self.project)], capture_output=True, timeout=120)

    def naive_pytest(self) -> float:
        tests = [str(p) for p in sorted(self.out.rglob("*.py")) if p.stem.endswith("_test") or p.stem.startswith("test_")]
        env = {**os.environ, "PYTHONPATH": str(self.out.parent), "JAX_PLATFORMS": "cpu", "PYTHONDONTWRITEBYTECODE": "1"}
        return timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(self.out.parent),
                      "-c", os.devnull, *tests], self.project, env)


def median_of(repeat: int, run) -> float:
    return statistics.median(run() for _ in range(repeat))


async def mcp_figures(package: Package, repeat: int) -> dict[str, float]:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-m", "tern", "mcp", "--project", str(package.project)],
                                   cwd=str(package.project), env={"PYTHONPATH": str(ROOT)})
    figures: dict[str, float] = {}
    started = time.perf_counter()
    async with Client(params) as client:
        figures["session"] = time.perf_counter() - started

        async def call(tool: str, **arguments) -> float:
            started = time.perf_counter()
            result = await client.call_tool(tool, arguments)
            seconds = time.perf_counter() - started
            if result.is_error:
                raise SystemExit(f"tern mcp {tool} failed: {result.content}")
            return seconds

        async def repeated(tool: str, before=None, **arguments) -> float:
            runs = []
            for _ in range(repeat):
                if before:
                    before()
                runs.append(await call(tool, **arguments))
            return statistics.median(runs)

        verify = {"path": str(package.out)}
        figures["cold"] = await call("verify", **verify)
        figures["warm"] = await repeated("verify", before=package.edit, **verify)
        figures["cached"] = await repeated("verify", **verify)
        source = str(package.project / "src" / package.name / package.module.name)
        figures["translate first"] = await call("translate", path=source)
        figures["translate"] = await repeated("translate", path=source)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--names", default="custom_dense")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for name in args.names.split(","):
        with tempfile.TemporaryDirectory(prefix="tern-bench-loop-") as tmp:
            project = Path(tmp)
            (project / "pyproject.toml").write_text("[project]\nname = 'bench'\n")
            package = Package(name, project)
            try:
                bench(package, args.repeat)
            finally:
                subprocess.run([*tern_command(), "serve", "--stop", "--project", str(project)], capture_output=True, timeout=120)
    return 0


def bench(package: Package, repeat: int) -> None:
    naive_pytest = package.naive_pytest()
    naive_tern = package.cli("--daemon", "never", "--no-cache")
    package.stop_and_clear()
    cli = {"cold": package.cli()}
    cli["warm"] = median_of(repeat, lambda: (package.edit(), package.cli())[1])
    cli["cached"] = median_of(repeat, package.cli)
    source = f"src/{package.name}/{package.module.name}"
    cli["translate"] = median_of(repeat, lambda: timed([*tern_command(), "migrate", source, "--dry-run", "-q"], package.project))
    edited = package.project / source

    def migrate_after_edit(*extra: str) -> float:
        with edited.open("a") as f:
            f.write("\n# edited\n")
        return timed([*tern_command(), "migrate", f"src/{package.name}", "--out", f"mig/{package.name}", "-q", *extra],
                     package.project)

    migrate_after_edit()  # the daemon's first migrate loads the rule tables
    cli["migrate"] = median_of(repeat, migrate_after_edit)
    cli["migrate, no daemon"] = median_of(repeat, lambda: migrate_after_edit("--daemon", "never"))
    # last: the full CLI runs on this interpreter, which may not be the console script's (pyenv's
    # python and python3.11), and then replaces the daemon with one the script's runs cannot use
    cli["cached, full CLI"] = median_of(repeat, lambda: package.cli(full=True))
    package.stop_and_clear()
    mcp = anyio.run(mcp_figures, package, repeat)

    print(f"package {package.name} (edits to {package.module.name}; medians of {repeat}); naive: fresh pytest of the translated "
          f"tests {naive_pytest:.2f} s, fresh tern verify --daemon never --no-cache {naive_tern:.2f} s")
    print(f"{'':24} {'wall':>10} {'pytest/x':>9} {'never/x':>9}")

    def row(label: str, seconds: float, ratios: bool = True) -> None:
        wall = f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"
        extra = f" {naive_pytest / seconds:8.1f}x {naive_tern / seconds:8.1f}x" if ratios else ""
        print(f"{label:24} {wall:>10}{extra}")

    for kind in ("cold", "warm", "cached"):
        row(f"CLI verify {kind}", cli[kind])
        row(f"MCP verify {kind}", mcp[kind])
    row("CLI verify cached, full", cli["cached, full CLI"])
    row("CLI migrate --dry-run", cli["translate"], ratios=False)
    row("CLI migrate, 1 edited", cli["migrate"], ratios=False)
    row("  the same, no daemon", cli["migrate, no daemon"], ratios=False)
    row("MCP translate, first", mcp["translate first"], ratios=False)
    row("MCP translate", mcp["translate"], ratios=False)
    row("MCP session start", mcp["session"], ratios=False)
    cached_ms, gap_ms = cli["cached"] * 1000, (mcp["cached"] - cli["cached"]) * 1000
    print(f"cached CLI verify {cached_ms:.0f} ms (target <= {TARGET_CACHED_MS:g} ms: "
          f"{'met' if cached_ms <= TARGET_CACHED_MS else 'NOT met'}; the full CLI: {cli['cached, full CLI'] * 1000:.0f} ms); "
          f"MCP - CLI cached {gap_ms:+.0f} ms (target within {TARGET_MCP_GAP_MS:g} ms: "
          f"{'met' if abs(gap_ms) <= TARGET_MCP_GAP_MS or gap_ms < 0 else 'NOT met'})")
    migrate_ms = cli["migrate"] * 1000
    print(f"migrate of the package after a one-file edit, through the daemon {migrate_ms:.0f} ms (target <= "
          f"{TARGET_MIGRATE_MS:g} ms: {'met' if migrate_ms <= TARGET_MIGRATE_MS else 'NOT met'}); in the CLI's own process "
          f"{cli['migrate, no daemon'] * 1000:.0f} ms ({cli['migrate, no daemon'] / cli['migrate']:.1f}x)")
    print(f"warm after an edit: CLI {naive_pytest / cli['warm']:.1f}x, MCP {naive_pytest / mcp['warm']:.1f}x a fresh pytest; "
          f"CLI {naive_tern / cli['warm']:.1f}x, MCP {naive_tern / mcp['warm']:.1f}x a fresh tern verify (issue 20 asks >= 100x "
          "over eval/bench_verify.py's naive loop, TF and translated tests)")


if __name__ == "__main__":
    sys.exit(main())
