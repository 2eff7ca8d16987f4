"""Run pytest inside a warm worker and read per-test outcomes from its junit file."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path


def junit_outcomes(junit: Path) -> tuple[dict[str, str], dict[str, dict]]:
    """test id -> "passed" / "skipped" / "failure: ..." / "error: ...", and for each
    test that did not pass its class and traceback (evidence for whoever fixes it)."""
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
                details[ident] = {"class": case.get("classname") or "", "trace": (child.text or "")[-3000:]}
            elif child.tag == "skipped":
                outcome = "skipped"
        tests[ident] = outcome
    return tests, details


def run_pytest(files: list[str], rootdir: Path, scratch: Path) -> dict:
    """Run ``files`` with pytest in this process; ``{"exit": code, "tests": {...}}``.

    No cache provider and no config file: nothing is written outside ``scratch``, and
    the user's own pytest configuration cannot change what is run. No unraisable-exception
    plugin: its clean-up runs ``gc.collect()`` five times, which over a warm worker's heap
    (TensorFlow or JAX loaded) costs half a second per run, more than the tests."""
    import pytest

    junit = scratch / "junit.xml"
    code = pytest.main([
        *files, "-q", "-p", "no:cacheprovider", "-p", "no:unraisableexception", "--rootdir", str(rootdir), "-c", "/dev/null",
        f"--junitxml={junit}", "-o", "junit_family=xunit1", "-W", "ignore::DeprecationWarning",
    ])
    tests, details = junit_outcomes(junit) if junit.exists() else ({}, {})
    return {"exit": int(code), "tests": tests, "details": details}
