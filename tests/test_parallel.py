"""Workers that parse ahead while the package is scanned (tern/engine/parallel.py)."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from pathlib import Path

import pytest

from tern.engine import parallel
from tern.engine.package import PackageInfo, scan_package
from tern.engine.runner import Job, migrate, parse_ahead, translate_file

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "tf"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked pool workers")

MODULE = "import tensorflow as tf\n\n\ndef f{i}(x):\n    return tf.reduce_sum(x, axis={i})\n"


def _tree(tmp_path: Path) -> list[Job]:
    """Modules of several sizes, one too large to parse ahead, a syntax error and a data file."""
    root = tmp_path / "pkg"
    root.mkdir()
    for i in range(12):
        (root / f"m{i}.py").write_text(MODULE.format(i=i) * (i + 1))
    (root / "large.py").write_text(MODULE.format(i=0) + "# " + "x" * parallel.AHEAD_FILE_BYTES + "\n")
    (root / "broken.py").write_text("def f(:\n    pass\n")
    (root / "notes.txt").write_text("not Python\n")
    return [Job(p.name, p, None) for p in sorted(root.iterdir())]


def _logging_parse(log: Path):
    def parse(job):
        parsed = parse_ahead(job)
        with open(log, "a") as f:
            f.write(f"{job.rel} {parsed is not None} {os.getpid()}\n")
        return parsed
    return parse


def _record(job, parsed):
    """What a worker was given for the job: its package, and whether the file was parsed ahead."""
    time.sleep(0.01)  # a translation takes time: both workers take jobs
    return job.rel, type(job.package).__name__, parsed is not None, os.getpid()


def _wait_for_lines(log: Path, count: int) -> list[str]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        lines = log.read_text().splitlines() if log.exists() else []
        if len(lines) >= count:
            return lines
        time.sleep(0.02)
    pytest.fail(f"the workers parsed {len(lines)} files ahead, not {count}")


#: workers parse ahead on the cores the scan leaves free: none on a single core
needs_two_cores = pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="no core is left to parse ahead on")


@needs_two_cores
def test_files_parsed_ahead_are_used_and_every_job_is_done_once(tmp_path):
    work = _tree(tmp_path)
    log = tmp_path / "parsed.log"
    with parallel.Workers(work, 2, translate=_record, parse=_logging_parse(log)) as workers:
        # the scan stands still until everything below the size limit was offered for parsing
        lines = _wait_for_lines(log, len(work) - 1)
        results = workers.results(PackageInfo())
    offered = {rel: (ok == "True", int(pid)) for rel, ok, pid in (line.split() for line in lines)}
    assert set(offered) == {job.rel for job in work} - {"large.py"}  # too large to parse ahead
    assert not offered["broken.py"][0] and not offered["notes.txt"][0]  # left for the translation to report
    assert [r[0] for r in results] == [job.rel for job in work]  # each result at its job's place
    assert {r[1] for r in results} == {"PackageInfo"}  # every job got the facts sent after the scan
    # a tree parsed ahead is used by the worker that parsed it, which translates it if it can
    assert all(parsed == (rel in offered and offered[rel] == (True, pid)) for rel, _, parsed, pid in results)
    # (a worker out of work takes a file another one parsed: here most files were parsed ahead)
    assert any(parsed for *_, parsed, _ in results)


@needs_two_cores
def test_parsing_ahead_stops_at_the_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(parallel, "AHEAD_BYTES", 1)  # the workers fork after this: they inherit it
    work = _tree(tmp_path)
    log = tmp_path / "parsed.log"
    with parallel.Workers(work, 2, translate=_record, parse=_logging_parse(log)) as workers:
        _wait_for_lines(log, 1)
        time.sleep(0.5)  # room for a parse the budget should have stopped
        results = workers.results(PackageInfo())
    assert len(log.read_text().splitlines()) == 1  # one worker parses at a time (a core is the scan's)
    assert [r[0] for r in results] == [job.rel for job in work]


def test_a_file_changed_after_it_was_parsed_is_parsed_again(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import tensorflow as tf\n\ny = tf.reduce_sum(x, axis=1)\n")
    job = Job("m.py", path, PackageInfo())
    stale = parse_ahead(job)
    path.write_text("import tensorflow as tf\n\ny = tf.reduce_mean(x, axis=2)\n")
    result, data = translate_file(job, stale)
    assert (result, data) == translate_file(job)
    assert b"jnp.mean(x, axis=2)" in data


def test_the_parse_ahead_translation_is_the_plain_one(tmp_path):
    """The tree parsed ahead gives the bytes and result a fresh parse gives, on every fixture."""
    package = scan_package(FIXTURES, sorted(FIXTURES.rglob("*.py")))
    for path in sorted(FIXTURES.rglob("*.py")):
        job = Job(path.relative_to(FIXTURES).as_posix(), path, package)
        parsed = parse_ahead(job)
        assert parsed is not None, path
        assert translate_file(job, parsed) == translate_file(job), path


def test_two_workers_give_the_tree_and_report_of_one_process(tmp_path):
    """All fixture packages as one tree: the package facts the workers get are pickled."""
    one = migrate(FIXTURES, tmp_path / "j1" / "tf", jobs=1)
    two = migrate(FIXTURES, tmp_path / "j2" / "tf", jobs=2)
    assert [f for f in two.files] == [f for f in one.files]
    files = sorted(p.relative_to(tmp_path / "j1") for p in (tmp_path / "j1").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "j2") for p in (tmp_path / "j2").rglob("*") if p.is_file())
    assert all((tmp_path / "j1" / f).read_bytes() == (tmp_path / "j2" / f).read_bytes() for f in files)


def test_a_worker_that_dies_fails_the_run_and_leaves_no_worker(tmp_path):
    work = _tree(tmp_path)
    before = set(multiprocessing.active_children())
    with pytest.raises(Exception) as caught:
        with parallel.Workers(work, 2, translate=_die_on_m3, parse=parse_ahead) as workers:
            workers.results(PackageInfo())
    assert type(caught.value).__name__ == "BrokenProcessPool"
    assert not set(multiprocessing.active_children()) - before


def _die_on_m3(job, parsed):
    if job.rel == "m3.py":
        os._exit(3)
    return job.rel


def test_a_block_left_before_the_facts_were_sent_stops_its_workers(tmp_path):
    """Workers waiting for package facts that never come would keep ``shutdown`` waiting forever."""
    before = set(multiprocessing.active_children())
    with parallel.Workers(_tree(tmp_path), 2, translate=_record, parse=parse_ahead):
        pass
    assert not set(multiprocessing.active_children()) - before
