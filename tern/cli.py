"""The ``tern`` command line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tern.engine.report import RunReport

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Migrate TensorFlow/Keras code and its tests to JAX/Flax.")
err = Console(stderr=True, emoji=False)  # user names such as `module:train:` are never emoji codes
out = Console(emoji=False)


@app.callback()
def main() -> None:
    """Tern: TensorFlow to JAX/Flax, rules first, honest about the rest."""


def _progress(console: Console):
    def wrap(items, total):
        if total < 8 or not console.is_terminal:
            yield from items
            return
        with Progress(
            TextColumn("[bold]translating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=True,
        ) as bar:
            task = bar.add_task("files", total=total)
            for item in items:
                yield item
                bar.advance(task)

    return wrap


@app.command()
def migrate(
    path: Path = typer.Argument(..., help="A TF package directory or a single file."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Directory receiving the translated tree (default: PATH_jax/NAME beside PATH)."),
    in_place: bool = typer.Option(False, "--in-place", help="Rewrite the source tree itself."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print a unified diff; write nothing."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Files translated in parallel processes."),
    report_path: Optional[Path] = typer.Option(None, "--report", help="Report path stem (writes .json and .md); default: beside the output."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary table."),
    then_verify: bool = typer.Option(False, "--verify", help="Then run tern verify on the output."),
    llm: Optional[bool] = typer.Option(None, "--llm/--no-llm", help="Hand what the rules leave to the configured LLM, verified (default: when one is configured)."),
    model: Optional[str] = typer.Option(None, "--model", help="The LLM's model name (else $TERN_LLM_MODEL or \\[tool.tern.llm])."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="An OpenAI-compatible endpoint (else $OPENAI_BASE_URL or \\[tool.tern.llm])."),
    attempts: Optional[int] = typer.Option(None, "--attempts", min=1, help="Answers per unit before the best is kept with a TODO (default 3)."),
    budget: Optional[int] = typer.Option(None, "--budget", min=1, help="Tokens this run may spend (default 200000)."),
    daemon: str = typer.Option("auto", "--daemon", help="For --verify and the LLM fallback: auto, never or require (see tern verify)."),
) -> None:
    """Translate PATH with the deterministic rules, then (when an LLM is configured) what they
    leave with the LLM, keeping only what verification accepts. Exit 0: all translated,
    1: residue, 2: errors or bad usage (with --verify or an LLM, 1 also when verification
    finds a mismatch or an error); 130: interrupted (accepted LLM work is kept; rerun to resume),
    143: terminated (SIGTERM)."""
    from tern.migrate_command import MigrateArgs, RulesPassed, migrate_rules

    overrides = {"model": model, "base_url": base_url, "attempts": attempts, "budget_tokens": budget}
    args = MigrateArgs(path, out_dir, in_place, dry_run, jobs, report_path, quiet, llm, overrides)
    ran = migrate_rules(args, out=out, err=err, cwd=Path.cwd(), progress=_progress(err))
    if not isinstance(ran, RulesPassed):
        raise typer.Exit(ran)
    report, stem, llm_config = ran.report, ran.stem, ran.llm_config
    if llm_config is not None and report.exit_code != 2:
        _run_agent(report, llm_config, stem, rules_seconds=ran.rules_seconds, daemon=daemon, quiet=quiet)
        then_verify = True
    if then_verify and not dry_run and Path(report.out).is_dir():
        from tern.verify.cli import Target

        code = _verify([Target(Path(report.source).resolve(), Path(report.out).resolve())], project=Path.cwd(),
                       daemon=daemon, use_cache=True, workers=None, json_path=None)
        raise typer.Exit(max(report.exit_code, code) if report.exit_code != 2 else 2)
    raise typer.Exit(report.exit_code)


def _run_agent(report: RunReport, config, stem: str, *, rules_seconds: float, daemon: str, quiet: bool) -> None:
    import anyio

    from tern.agent import cli as agent_cli
    from tern.agent.run import fold_into, run_agent
    from tern.engine.runner import write_atomic
    from tern.sandbox.client import DaemonUnavailable

    def progress(message: str) -> None:
        if err.is_terminal:
            err.print(f"[dim]{escape(message)}[/]", highlight=False)

    if not quiet:
        err.print(f"LLM fallback: {config.describe()}", markup=False, highlight=False)
    pair = (Path(report.source).resolve(), Path(report.out).resolve())
    try:
        reports = anyio.run(lambda: run_agent([pair], config=config, project=Path.cwd(), daemon=daemon, progress=progress))
    except KeyboardInterrupt:
        err.print("interrupted: units accepted so far are in the output and journaled in .tern/; rerun to resume")
        raise typer.Exit(130)
    except DaemonUnavailable as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(2)
    fold_into(report, reports[0], rules_seconds=rules_seconds)
    write_atomic(Path(stem + ".json"), report.to_json().encode())
    write_atomic(Path(stem + ".md"), report.to_markdown().encode())
    if not quiet:
        out.print(agent_cli.table(reports))
    out.print(agent_cli.summary(reports, config), highlight=False)


@app.command()
def serve(
    project: Optional[Path] = typer.Option(None, "--project", help="Any path inside the project (default: the current directory)."),
    idle: float = typer.Option(900.0, "--idle", min=0.0, help="Exit after this many seconds without requests."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Workers per kind (default: the Sandbox's choice)."),
    writable: list[Path] = typer.Option([], "--writable", help="A directory jobs may write under (repeatable)."),
    stop: bool = typer.Option(False, "--stop", help="Stop the project's server and its workers."),
    status: bool = typer.Option(False, "--status", help="Print the project's server status."),
) -> None:
    """Keep the project's sandbox workers warm behind a local socket, in the foreground.

    Clients start one on demand; run it yourself to watch its log. Exit 1: none to report
    (--status) or one runs already.
    """
    import asyncio

    from tern.sandbox import client, server
    from tern.sandbox.daemon import paths_for

    if stop and status:
        sys.stderr.write("error: --stop and --status exclude each other\n")
        raise typer.Exit(2)
    if project is not None and not project.is_dir():
        sys.stderr.write(f"error: no such directory: {project}\n")
        raise typer.Exit(2)
    paths = paths_for(project or Path.cwd())
    try:
        if status:
            info = asyncio.run(client.daemon_status(paths))
            sys.stdout.write(client.describe(info) if info else f"no tern server for {paths.project}\n")
            raise typer.Exit(0 if info else 1)
        if stop:
            pid = asyncio.run(client.stop_daemon(paths))
            sys.stdout.write(f"stopped tern server {pid}\n" if pid else f"no tern server for {paths.project}\n")
            return
    except client.DaemonUnavailable as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(1)
    raise typer.Exit(server.main(paths.project, idle=idle, workers=workers, writable_roots=tuple(writable),
                                 answers={"verify": _answer_verify, "migrate": _answer_migrate}))


async def _answer_verify(request, sandbox, emit):
    """The daemon's answer to the thin client's verify (imported on the first request, not at start)."""
    from tern.verify.served import answer_verify

    return await answer_verify(request, sandbox, emit)


async def _answer_migrate(request, sandbox, emit):
    """The daemon's answer to the thin client's rules-only migrate (imported on the first request)."""
    from tern.migrate_command import answer_migrate

    return await answer_migrate(request, sandbox, emit)


def _executor(project: Path, kind: Optional[str], address: Optional[str]):
    """``[tool.tern.executor]`` with --executor/--address on top; Ray checked here, before any work."""
    from tern.sandbox.executor import load_executor

    config = load_executor(project, kind, address)
    if config.kind == "ray":
        from tern.sandbox.ray_runner import require_ray

        require_ray()
    return config


def _verify(targets, *, project: Path, daemon: str, use_cache: bool, workers: Optional[int], json_path: Optional[Path],
            executor=None, search: Optional[bool] = None) -> int:
    import anyio

    from tern.verify import cli as verify_cli

    def progress(message: str) -> None:
        if err.is_terminal:
            err.print(f"[dim]{escape(message)}[/]")

    reports, info = anyio.run(lambda: verify_cli.verify_targets(
        targets, project=project, daemon=daemon, use_cache=use_cache, workers=workers, progress=progress,
        executor=executor, search=search))
    return verify_cli.finish(reports, info, targets, json_path, out)


@app.command()
def verify(
    path: Path = typer.Argument(..., help="A translated package (from tern migrate), or a directory of them."),
    original: Optional[Path] = typer.Option(None, "--original", help="The TF package PATH was translated from (default: from the migrate report)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Where to write the JSON report (default: beside PATH)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Run every job again; do not read cached results."),
    search: Optional[bool] = typer.Option(None, "--search/--no-search", help="The gradient-ascent search beyond the probes (default: \\[tool.tern.verify] search_rounds, on); --no-search for a quick check while editing."),
    daemon: str = typer.Option("auto", "--daemon", help="auto: use or start the project's tern server; never: workers of this process; require."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Workers per kind for a sandbox started here."),
    executor: Optional[str] = typer.Option(None, "--executor", help="Where sandbox jobs run: local (default) or ray (see docs/ray.md; default from \\[tool.tern.executor])."),
    address: Optional[str] = typer.Option(None, "--address", help="With --executor ray: the cluster's address (default: RAY_ADDRESS, else a local Ray)."),
    project: Optional[Path] = typer.Option(None, "--project", help="Project whose .tern/ holds the cache (default: the current directory's)."),
) -> None:
    """Compare a translation with its TF original: replayed layer calls and translated tests.

    Exit 0: nothing differs (untested modules are listed); 1: a mismatch or an error; 2: bad usage.
    """
    from tern.sandbox.ray_runner import RayUnavailable
    from tern.verify.cli import TargetError, find_targets
    from tern.verify.config import ConfigError

    try:
        targets = find_targets(path, original)
        config = _executor(project or Path.cwd(), executor, address)
        code = _verify(targets, project=project or Path.cwd(), daemon=daemon, use_cache=not no_cache, workers=workers,
                       json_path=json_path, executor=config, search=search)
    except (TargetError, ConfigError, ValueError, RayUnavailable) as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(2)
    raise typer.Exit(code)


@app.command("mcp")
def mcp_server(
    project: Optional[Path] = typer.Option(None, "--project", help="Project whose .tern/ cache and server to use (default: the current directory's)."),
    timeout: float = typer.Option(600.0, "--timeout", min=0.0, help="Seconds one tool call may take; past them it is cancelled and answered with an error."),
    daemon: str = typer.Option("auto", "--daemon", help="For verify and run_test: auto (use or start the project's tern server), never, require."),
) -> None:
    """Serve tern's tools (translate, verify, run_test, explain_todo, remaining) to a coding
    agent over the Model Context Protocol, on stdin/stdout. Needs tern[mcp] (docs/mcp.md)."""
    from tern.sandbox.daemon import resolve_mode

    if project is not None and not project.is_dir():
        sys.stderr.write(f"error: no such directory: {project}\n")
        raise typer.Exit(2)
    try:
        daemon = resolve_mode(daemon)
        from tern.mcp.server import serve as serve_mcp

        code = serve_mcp((project or Path.cwd()).resolve(), timeout=timeout, daemon=daemon)
    except ValueError as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(2)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "mcp":
            raise
        sys.stderr.write("error: tern mcp needs the mcp package: pip install 'tern[mcp]'\n")
        raise typer.Exit(2)
    raise typer.Exit(code)


rules_app = typer.Typer(help="The rewrite rules.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")


@rules_app.command("suggest")
def rules_suggest(
    project: Optional[Path] = typer.Option(None, "--project", help="Project whose .tern/ journal to read (default: the current directory's)."),
    min_support: int = typer.Option(2, "--min-support", min=1, help="Accepted units a pattern needs to be listed."),
) -> None:
    """List patterns that accepted LLM translations repeated, as candidate deterministic rules."""
    from tern.agent import cli as agent_cli

    raise typer.Exit(agent_cli.print_suggestions(project or Path.cwd(), min_support, out))


@app.command("eval")
def evaluate(
    suites: list[Path] = typer.Argument(None, help="Suites: directories of TF packages or suite .toml files (with --compare: two eval JSON files)."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Run directory for translations and reports (default: .tern/eval/<suite> of the project)."),
    baseline: Optional[Path] = typer.Option(None, "--baseline", help="A previous eval JSON: list regressions and improvements; exit 1 on a regression."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Where to write the JSON (default: in the run directory)."),
    markdown_path: Optional[Path] = typer.Option(None, "--markdown", help="Where to write the Markdown scorecard."),
    html_path: Optional[Path] = typer.Option(None, "--html", help="Where to write the self-contained HTML report."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Run every case and job again; do not read cached results."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Cases migrated in parallel processes."),
    llm: Optional[bool] = typer.Option(None, "--llm/--no-llm", help="Use the LLM agent when one is configured (default), or rules only."),
    compare: bool = typer.Option(False, "--compare", help="Compare two eval JSON files instead of running: tern eval --compare A.json B.json."),
    daemon: str = typer.Option("auto", "--daemon", help="auto: use or start the project's tern server; never: workers of this process; require."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Workers per kind for a sandbox started here."),
    executor: Optional[str] = typer.Option(None, "--executor", help="Where sandbox jobs run: local (default) or ray (see docs/ray.md; default from \\[tool.tern.executor])."),
    address: Optional[str] = typer.Option(None, "--address", help="With --executor ray: the cluster's address (default: RAY_ADDRESS, else a local Ray)."),
    project: Optional[Path] = typer.Option(None, "--project", help="Project whose .tern/ holds the cache (default: the current directory's)."),
) -> None:
    """Score translations over suites of cases; write the scorecard as JSON, Markdown and HTML.

    Exit 0: no regression against --baseline and no case worse than its suite expects;
    1: a regression or a case worse than expected; 2: bad usage.
    """
    from tern.evaluation import cli as eval_cli
    from tern.sandbox.ray_runner import RayUnavailable

    try:
        if compare:
            code = eval_cli.compare_runs(list(suites or []), json_path=json_path, markdown_path=markdown_path,
                                         html_path=html_path, out=out)
        else:
            code = eval_cli.run_suites(list(suites or []), out_dir=out_dir, baseline=baseline, json_path=json_path,
                                       markdown_path=markdown_path, html_path=html_path, use_cache=not no_cache,
                                       jobs=jobs, llm=llm, daemon=daemon, workers=workers, project=project, out=out, err=err,
                                       executor=_executor(project or Path.cwd(), executor, address))
    except (eval_cli.UsageError, ValueError, RayUnavailable) as exc:
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(2)
    raise typer.Exit(code)


cache_app = typer.Typer(help="The verification cache under .tern/.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


@cache_app.command("clear")
def cache_clear(project: Optional[Path] = typer.Option(None, "--project", help="Project whose .tern/ to clear (default: the current directory's).")) -> None:
    """Delete cached results, recordings and the JAX compilation cache."""
    from tern.sandbox.daemon import find_project
    from tern.verify.cache import Cache

    state = find_project(project or Path.cwd()) / ".tern"
    cache = Cache(state)
    count = cache.clear()
    cache.close()
    out.print(f"cleared {count} cached results from {state}", markup=False)


@app.command()
def weights(
    source: Path = typer.Argument(..., help="A .keras or .h5 file, a TF checkpoint (prefix or directory) or a SavedModel directory."),
    original: Path = typer.Option(..., "--original", help="The TF package the model comes from."),
    translated: Path = typer.Option(..., "--translated", help="Its Flax translation (from tern migrate)."),
    out_dir: Path = typer.Option(..., "--out", "-o", help="Directory receiving checkpoint/ and tern-weights.json."),
    model: Optional[str] = typer.Option(None, "--model", help="pkg.module:Name, a class or a function building the model (optional for .keras)."),
    args: Optional[str] = typer.Option(None, "--args", help="Its positional arguments, a JSON list."),
    kwargs: Optional[str] = typer.Option(None, "--kwargs", help="Its keyword arguments, a JSON object."),
    input_shape: list[str] = typer.Option([], "--input-shape", help="An input's shape with batch, e.g. 2,12 (repeatable; default: the model's own)."),
    input_dtype: list[str] = typer.Option([], "--input-dtype", help="An input's dtype (repeatable; default float32)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="keras, h5, checkpoint or savedmodel (default: from SOURCE)."),
    rtol: Optional[float] = typer.Option(None, "--rtol", help="Relative tolerance of the replay (default: \\[tool.tern.verify], else 1e-5)."),
    atol: Optional[float] = typer.Option(None, "--atol", help="Absolute tolerance of the replay (default: \\[tool.tern.verify], else 1e-5)."),
    project: Optional[Path] = typer.Option(None, "--project", help="Project whose .tern/ and server to use (default: the current directory's)."),
    daemon: str = typer.Option("auto", "--daemon", help="auto: use or start the project's tern server; never: workers of this process; require."),
) -> None:
    """Convert a TF model's weights into the Flax variables of its translation, saved with orbax,
    and check them by replaying seeded inputs.

    Exit 0: the Flax outputs match Keras's; 1: a mismatch or weights that do not fit; 2: bad usage.
    """
    import anyio

    from tern.errors import UsageError
    from tern.sandbox.client import DaemonUnavailable
    from tern.sandbox.daemon import resolve_mode
    from tern.verify import weights_cmd

    try:
        daemon = resolve_mode(daemon)
        if project is not None and not project.is_dir():
            raise UsageError(f"--project {project}: no such directory")
        request = weights_cmd.make_request(source, original=original, translated=translated, out=out_dir, model=model,
                                           fmt=fmt, args=args, kwargs=kwargs, shapes=tuple(input_shape),
                                           dtypes=tuple(input_dtype), rtol=rtol, atol=atol)
    except ValueError as exc:  # UsageError, or an unknown --daemon mode
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(2)
    try:
        report = anyio.run(lambda: weights_cmd.port_and_publish(request, project=project or Path.cwd(), daemon=daemon))
    except DaemonUnavailable as exc:  # --daemon require, and none could be had
        sys.stderr.write(f"error: {exc}\n")
        raise typer.Exit(2)
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback (OSError: a file we could not write)
        sys.stderr.write(f"error: {type(exc).__name__}: {exc}\n")
        raise typer.Exit(1)
    if report["status"] != "usage":
        sys.stdout.write("".join(line + "\n" for line in weights_cmd.summary(report, request.out)))
    if report.get("message"):
        sys.stderr.write(f"error: {report['message']}\n")
    raise typer.Exit(weights_cmd.exit_code(report))


@app.command()
def pr(
    paths: Optional[list[Path]] = typer.Argument(None, help="TF package directories (default: \\[tool.tern.pr] packages, or --discover, whose sources changed since their last migration)."),
    base: Optional[str] = typer.Option(None, "--base", help="Branch the pull requests go into (default: \\[tool.tern.pr] base, else main)."),
    remote: Optional[str] = typer.Option(None, "--remote", help="Git remote to fetch from and push to (default: origin)."),
    group: Optional[str] = typer.Option(None, "--group", help="One pull request for all the packages, on branch tern/migrate-GROUP."),
    out_root: Optional[str] = typer.Option(None, "--out-root", help="Translations go to OUT_ROOT/NAME (default: PATH_jax/NAME beside PATH)."),
    discover: bool = typer.Option(False, "--discover", help="With no PATH: every top-level package that imports TensorFlow or Keras."),
    label: Optional[list[str]] = typer.Option(None, "--label", help="Label of the pull request (repeatable; default: tern, migration)."),
    no_verify: bool = typer.Option(False, "--no-verify", help="Do not verify; the pull request is a draft."),
    daemon: str = typer.Option("auto", "--daemon", help="Verification: auto (use or start the project's tern server), never, require."),
    jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Files translated in parallel processes."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print branch, commit message, diff stat and pull request body; push nothing, call no API."),
    repo: Optional[str] = typer.Option(None, "--repo", help="OWNER/NAME on GitHub (default: GITHUB_REPOSITORY, else from the remote's URL)."),
    api_url: Optional[str] = typer.Option(None, "--api-url", help="GitHub REST API root (default: GITHUB_API_URL, else https://api.github.com)."),
    token_env: Optional[str] = typer.Option(None, "--token-env", help="Environment variable holding the token (default: GITHUB_TOKEN, then GH_TOKEN)."),
    no_comment: bool = typer.Option(False, "--no-comment", help="Do not comment on a pull request when a new commit updates it."),
    rebase: bool = typer.Option(False, "--rebase", help="Rebuild the branch on the base (only when every commit on it is tern's; --force-with-lease)."),
    bot_name: str = typer.Option("tern-bot", "--bot-name", help="Author and committer name of the bot's commits."),
    bot_email: str = typer.Option("tern-bot@users.noreply.github.com", "--bot-email", help="Their e-mail; commits with another one are a person's."),
) -> None:
    """Migrate, verify, commit on tern/migrate-NAME, push, and open or update its pull request.

    Exit 0: done, or nothing to do; 1: a package failed (its local branch and commit are kept); 2: bad usage.
    """
    from tern.pr import Options, open_pull_requests
    from tern.pr.git import Identity

    options = Options(paths=list(paths or []), base=base, remote=remote, group=group, out_root=out_root, discover=discover,
                      labels=list(label) if label else None, verify=not no_verify, daemon=daemon, jobs=jobs, dry_run=dry_run,
                      repo=repo, api_url=api_url, token_env=token_env, comment=not no_comment, rebase=rebase,
                      identity=Identity(bot_name, bot_email), cwd=Path.cwd())
    raise typer.Exit(open_pull_requests(options, say=lambda line: sys.stdout.write(line + "\n"),
                                        note=lambda line: sys.stderr.write(line + "\n")))
