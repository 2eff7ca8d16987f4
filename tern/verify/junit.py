"""Run pytest inside a warm worker and read per-test outcomes from its junit file."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path


def junit_outcomes(junit: Path, untranslated: dict[str, str] | None = None) -> tuple[dict[str, str], dict[str, dict]]:
    """test id -> "passed" / "skipped" / "failure: ..." / "error: ..." / "untranslated: ...",
    and for each test that did not pass its class and traceback (evidence for whoever fixes
    it). ``untranslated``: pytest node ids (tests, or test files that failed to collect) that
    ended on a line tern left untranslated (``UntranslatedLines.found``)."""
    by_test, by_file = {}, {}
    for nodeid, reason in (untranslated or {}).items():
        parts = nodeid.split("::")
        if len(parts) > 1:
            by_test[(parts[0], parts[-1])] = reason
        else:
            by_file[parts[0]] = reason
    tests: dict[str, str] = {}
    details: dict[str, dict] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.get("name") == "test_session":
            continue  # tf.test.TestCase's own inherited method, which pytest collects and skips
        ident = f"{case.get('file') or case.get('classname')}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = f"{child.tag}: {(child.get('message') or '')[:300]}"
                reason = by_test.get((case.get("file"), case.get("name")))
                if reason is None and child.tag == "error" and "collection failure" in (child.get("message") or ""):
                    reason = by_file.get(case.get("file"))
                if reason is not None:
                    outcome = f"untranslated: {reason}"
                details[ident] = {"class": case.get("classname") or "", "trace": (child.text or "")[-3000:]}
            elif child.tag == "skipped":
                outcome = "skipped"
        tests[ident] = outcome
    return tests, details


def run_pytest(files: list[str], rootdir: Path, scratch: Path, *, translated: bool = False,
               select: list[str] | None = None) -> dict:
    """Run ``files`` with pytest in this process; ``{"exit": code, "tests": {...}}``.
    ``translated``: the files are tern's translations, whose tests may end on a line tern
    left untranslated (``untranslated.py``). ``select``: node ids within ``files`` to run
    instead of all their tests (``tern mcp``'s run_test).

    No cache provider and no config file: nothing is written outside ``scratch``, and
    the user's own pytest configuration cannot change what is run. No ``conftest.py`` above
    ``rootdir`` (``--confcutdir``): ``rootdir`` holds only the package (``run.link_root``),
    whose parents are tern's state directory and the user's project, where a conftest of the
    TF code base (importing TensorFlow into the JAX worker) was loaded, and pytest listed
    every parent directory's entries to collect the files. No unraisable-exception
    plugin: its clean-up runs ``gc.collect()`` five times, which over a warm worker's heap
    (TensorFlow or JAX loaded) costs half a second per run, more than the tests. The
    installed plugins are found once per worker (``pytest_plugins.py``)."""
    import pytest

    from tern.verify.compiled import keep_pytest_rewrites
    from tern.verify.pytest_plugins import EntryPointPlugins, installed_plugins
    from tern.verify.untranslated import UntranslatedLines

    keep_pytest_rewrites()  # test files that did not change are not rewritten again

    junit = scratch / "junit.xml"
    lines = UntranslatedLines(rootdir, files) if translated else None
    code = pytest.main([
        *(select or files), "-q", "--continue-on-collection-errors", "-p", "no:cacheprovider", "-p", "no:unraisableexception", "--rootdir", str(rootdir), "-c", "/dev/null",
        "--confcutdir", str(rootdir), "--disable-plugin-autoload",
        f"--junitxml={junit}", "-o", "junit_family=xunit1", "-W", "ignore::DeprecationWarning",
        "-W", "ignore::pytest.PytestAssertRewriteWarning",  # plugins the worker imported at start-up
    ], plugins=[*([lines] if lines is not None else []), EntryPointPlugins(installed_plugins())])
    tests, details = junit_outcomes(junit, lines.found if lines is not None else None) if junit.exists() else ({}, {})
    return {"exit": int(code), "tests": tests, "details": details}
