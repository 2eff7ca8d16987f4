"""Run translated packages with TensorFlow and Keras made unimportable.

Usage: python tf_free_runner.py OUT_ROOT RESULT_JSON PACKAGE...

For each package under OUT_ROOT: import every non-test module (recording failures),
then run all translated tests in this one process with pytest, writing per-test
outcomes. One interpreter for everything: JAX is imported once.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from pathlib import Path

from tern.verify.junit import junit_outcomes as read_junit

import os


def junit_outcomes(junit: Path) -> dict[str, dict[str, str]]:
    """package -> test id -> outcome (``tern.verify.junit``'s reading, grouped by package)."""
    tests: dict[str, dict[str, str]] = {}
    for ident, outcome in read_junit(junit).items():
        tests.setdefault(ident.split("/")[0].split("::")[0].split(".")[0], {})[ident] = outcome
    return tests


def block_tensorflow() -> None:
    # JAX's default threefry PRNG compiles for seconds per new shape on CPU; the translated
    # tests do not depend on the random stream, and RBG compiles ~10x faster. Compiled
    # executables are cached on disk so reruns skip XLA.
    os.environ.setdefault("JAX_DEFAULT_PRNG_IMPL", "rbg")
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(Path.home() / ".cache" / "tern" / "jax"))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    for blocked in ("tensorflow", "keras", "tf_keras"):
        sys.modules[blocked] = None  # any `import tensorflow` now raises ImportError


def main() -> int:
    block_tensorflow()
    root, result_path, packages = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    sys.path.insert(0, str(root))
    imports: dict[str, dict[str, str]] = {}
    for package in packages:
        imports[package] = {}
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            if rel.name.startswith("test_") or rel.name.endswith("_test") or rel.name == "conftest":
                continue
            name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
            try:
                importlib.import_module(name)
                imports[package][name] = "ok"
            except BaseException:  # noqa: BLE001 - record anything, go on
                imports[package][name] = traceback.format_exc(limit=3)
    import pytest

    junit = result_path.with_suffix(".xml")
    args = [str(root / p) for p in packages]
    code = pytest.main([
        *args, "-q", "-p", "no:cacheprovider", "--rootdir", str(root), "-c", "/dev/null",
        f"--junitxml={junit}", "-o", "junit_family=xunit1",
    ])
    tests: dict[str, dict[str, str]] = {p: {} for p in packages}
    if junit.exists():
        tests.update(junit_outcomes(junit))
    result_path.write_text(json.dumps({"pytest_exit": int(code), "imports": imports, "tests": tests}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
