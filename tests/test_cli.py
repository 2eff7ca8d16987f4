"""``tern migrate`` the way a user runs it, on small trees built in tmp_path.

The main paths (mirroring, bad files, dry run, in place, ``-j``) go through a real
subprocess (``python -m tern``); cheap variations use typer's CliRunner in-process. The
CLI never imports TensorFlow or JAX, so each subprocess costs only the LibCST/rich start.
No test measures wall-clock time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from tern.cli import app

ROOT = Path(__file__).resolve().parents[1]

OPS = "import tensorflow as tf\n\ndef total(x):\n    return tf.reduce_sum(x, axis=1)\n"
RAW = "import tensorflow as tf\n\n\ndef f(x):\n    y = tf.raw_ops.Foo(x)\n    return y\n"
PLAIN = "def helper(n):\n    return n + 1\n"
README = b"mypkg: data file, copied as is.\r\nline two \xe2\x9c\x93\r\n"
BLOB = bytes(range(256)) * 4  # not text at all


# ---------------------------------------------------------------------------- helpers


def make_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_bytes(content.encode("utf-8"))
        else:
            path.write_bytes(content)
    return root


def make_pkg(tmp_path: Path, *, residue: bool = False, extra: dict[str, str | bytes] | None = None) -> Path:
    files: dict[str, str | bytes] = {
        "__init__.py": "",
        "ops.py": OPS,
        "README.txt": README,
        "sub/__init__.py": "",
        "sub/util.py": PLAIN,
        "sub/data/weights.bin": BLOB,
    }
    if residue:
        files["sub/raw.py"] = RAW
    files.update(extra or {})
    return make_tree(tmp_path / "mypkg", files)


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def tree_hash(root: Path) -> dict[str, str]:
    return {rel: hashlib.sha256(data).hexdigest() for rel, data in tree_bytes(root).items()}


def tree_stats(root: Path) -> dict[str, tuple[int, int]]:
    return {
        p.relative_to(root).as_posix(): (p.stat().st_mtime_ns, p.stat().st_ino)
        for p in sorted(root.rglob("*")) if p.is_file()
    }


def age(root: Path) -> None:
    """Give every file under root an old, fixed mtime, so that any rewrite is visible."""
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, ns=(1_000_000_000 * 10**9, 1_000_000_000 * 10**9))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def tern(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The real command, as a user runs it (stdout/stderr are pipes, not a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "tern", *map(str, args)], capture_output=True, text=True,
        cwd=cwd or ROOT, env=_env(), timeout=600,
    )


def tern_inproc(*args: str | Path):
    """The same command through typer's CliRunner (no interpreter start-up)."""
    return CliRunner().invoke(app, [*map(str, args)], catch_exceptions=False)


def report_of(out: Path) -> dict:
    return json.loads(out.with_name(out.name + ".tern-report.json").read_text())


def python_error_line(text: str) -> int:
    """Where CPython itself places the syntax error: what a user's editor shows."""
    try:
        compile(text, "<file>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return exc.lineno
    raise AssertionError("expected a syntax error")


def _assert_error_reported(stderr: str, src: Path, line: int, words: str) -> None:
    """An ``error: FILE:LINE: reason`` message. Line breaks are ignored here (a terminal
    may wrap); that each message is one unwrapped line is checked on its own below."""
    flat = stderr.replace("\n", "")
    where = f"{src}:{line}:"
    assert where in flat, f"stderr does not name {where!r}:\n{stderr}"
    at = flat.index(where)
    start = flat.rfind("error:", 0, at)
    end = flat.find("error:", at)
    message = flat[start : end if end != -1 else len(flat)]
    assert start != -1 and words in message, f"no clear error message for {where!r}:\n{stderr}"


def _assert_nothing_lost(pkg: Path, out: Path, bad: dict[str, bytes]) -> None:
    assert set(tree_bytes(out)) == set(tree_bytes(pkg)), "output does not mirror the input"
    for rel, data in bad.items():
        assert (out / rel).read_bytes() == data, f"{rel} not copied unchanged"
    ops = (out / "ops.py").read_text()
    assert "jnp.sum(x, axis=1)" in ops and "tensorflow" not in ops, ops
    assert (out / "README.txt").read_bytes() == README
    assert (out / "sub/data/weights.bin").read_bytes() == BLOB


# ---------------------------------------------------------------------------- the tree


def test_output_mirrors_input_and_source_untouched(tmp_path):
    pkg = make_pkg(tmp_path, extra={"LICENSE": "MIT\n", "sub/deeper/conf.json": '{"a": 1}\n'})
    before = tree_hash(pkg)
    stats_before = tree_stats(pkg)
    out = tmp_path / "out" / "mypkg"

    proc = tern("migrate", pkg, "--out", out)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert set(tree_bytes(out)) == set(before), "same relative paths, nothing more, nothing less"
    for rel in ("README.txt", "LICENSE", "sub/deeper/conf.json", "sub/data/weights.bin", "__init__.py", "sub/util.py"):
        assert (out / rel).read_bytes() == (pkg / rel).read_bytes(), rel
    assert tree_hash(pkg) == before and tree_stats(pkg) == stats_before, "the source tree was modified"
    assert out.with_name("mypkg.tern-report.json").is_file() and out.with_name("mypkg.tern-report.md").is_file()
    assert "ops.py" in proc.stdout and "translated" in proc.stdout  # the summary table
    # the translation itself, layout (the blank line before `def`) included
    assert (out / "ops.py").read_text() == "import jax.numpy as jnp\n\ndef total(x):\n    return jnp.sum(x, axis=1)\n"


# ---------------------------------------------------------------------------- exit codes


def test_exit_0_when_everything_translated(tmp_path):
    pkg = make_pkg(tmp_path)
    result = tern_inproc("migrate", pkg, "--out", tmp_path / "out" / "mypkg", "-q")
    assert result.exit_code == 0, result.output
    report = report_of(tmp_path / "out" / "mypkg")
    assert report["exit_code"] == 0
    assert report["totals"]["todos"] == 0 and report["totals"]["errors"] == 0
    assert report["totals"]["translated"] == 1  # ops.py


def test_exit_1_when_a_todo_remains(tmp_path):
    pkg = make_pkg(tmp_path, residue=True)
    out = tmp_path / "out" / "mypkg"
    result = tern_inproc("migrate", pkg, "--out", out, "-q")
    assert result.exit_code == 1, result.output
    assert "# TODO(tern): tf.raw_ops.Foo" in (out / "sub/raw.py").read_text()
    report = report_of(out)
    assert report["exit_code"] == 1 and report["totals"]["errors"] == 0 and report["totals"]["todos"] >= 1


def test_exit_2_when_a_file_errors(tmp_path):
    pkg = make_pkg(tmp_path, residue=True, extra={"broken.py": "def f(:\n    pass\n"})
    out = tmp_path / "out" / "mypkg"
    result = tern_inproc("migrate", pkg, "--out", out, "-q")
    assert result.exit_code == 2, result.output  # errors win over residue
    report = report_of(out)
    assert report["exit_code"] == 2 and report["totals"]["errors"] == 1
    (entry,) = [f for f in report["files"] if f["path"] == "broken.py"]
    assert entry["status"] == "error" and entry["error"] and entry["error_line"] >= 1


# ---------------------------------------------------------------------------- bad files


def test_unparsable_file_reported_copied_and_rest_translated(tmp_path):
    bad_text = "import tensorflow as tf\n\n\ndef f(:\n    return tf.ones(3)\n"
    pkg = make_pkg(tmp_path, extra={"broken.py": bad_text})
    out = tmp_path / "out" / "mypkg"

    proc = tern("migrate", pkg, "--out", out, "-q")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    _assert_nothing_lost(pkg, out, {"broken.py": bad_text.encode()})
    line = python_error_line(bad_text)  # 4: the `def f(:` line
    _assert_error_reported(proc.stderr, pkg / "broken.py", line, "does not parse")
    (entry,) = [f for f in report_of(out)["files"] if f["path"] == "broken.py"]
    assert entry["status"] == "error" and entry["error_line"] == line


def test_non_utf8_file_reported_copied_and_rest_translated(tmp_path):
    utf16 = b"\xff\xfe" + "import tensorflow as tf\nx = tf.ones(3)\n".encode("utf-16-le")
    latin1 = b"import tensorflow as tf\n\n# caf\xe9 au lait\nx = 1\n"
    pkg = make_pkg(tmp_path, extra={"utf16.py": utf16, "sub/latin1.py": latin1})
    out = tmp_path / "out" / "mypkg"

    proc = tern("migrate", pkg, "--out", out, "-q")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    _assert_error_reported(proc.stderr, pkg / "utf16.py", 1, "UTF-8")
    _assert_error_reported(proc.stderr, pkg / "sub" / "latin1.py", 3, "UTF-8")
    _assert_nothing_lost(pkg, out, {"utf16.py": utf16, "sub/latin1.py": latin1})
    errors = {f["path"]: f["error_line"] for f in report_of(out)["files"] if f["status"] == "error"}
    assert errors == {"utf16.py": 1, "sub/latin1.py": 3}


def test_py_file_that_is_not_python_text_reported_copied_and_rest_translated(tmp_path):
    # Notes saved with a .py name: valid UTF-8, valid Python up to line 3, where the tokenizer
    # meets a character Python does not have.
    notes = "# Release notes\n# =============\nPrice: $5 per seat (see the wiki)\nMore prose here.\n"
    pkg = make_pkg(tmp_path, extra={"notes.py": notes})
    out = tmp_path / "out" / "mypkg"

    proc = tern("migrate", pkg, "--out", out, "-q")

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    _assert_nothing_lost(pkg, out, {"notes.py": notes.encode()})
    line = python_error_line(notes)  # 3
    _assert_error_reported(proc.stderr, pkg / "notes.py", line, "does not parse")
    (entry,) = [f for f in report_of(out)["files"] if f["path"] == "notes.py"]
    assert entry["status"] == "error" and entry["error_line"] == line


def test_error_lines_are_plain_text_on_one_line(tmp_path):
    # What a user greps for, or clicks in an editor or CI log: `error: FILE:LINE: reason`,
    # one line each, the path verbatim. stderr here is a pipe, as in CI; paths are long
    # (as under pytest, or in a monorepo) and may hold brackets.
    deep = "a_rather_long_directory_name/another_long_directory_name_for_good_measure"
    bad = "def f(:\n    pass\n"
    pkg = make_pkg(tmp_path, extra={f"{deep}/broken.py": bad, "exp[v2]/broken.py": bad})
    proc = tern("migrate", pkg, "--out", tmp_path / "out" / "mypkg", "-q")
    assert proc.returncode == 2
    for src in (pkg / deep / "broken.py", pkg / "exp[v2]" / "broken.py"):
        message = re.compile(r"^error: " + re.escape(str(src)) + r":\d+: does not parse", re.M)
        assert message.search(proc.stderr), f"no stderr line `error: {src}:LINE: ...`:\n{proc.stderr}"


# ---------------------------------------------------------------------------- reports


def _code_after_todo(lines: list[str], line: int, construct: str, reason: str) -> None:
    """``line`` (1-based) is code, directly below a comment block holding the TODO."""
    assert 1 <= line <= len(lines), line
    target = lines[line - 1].strip()
    assert target and not target.startswith("#"), f"line {line} is not code: {target!r}"
    block = []
    i = line - 2
    while i >= 0 and lines[i].strip().startswith("#"):
        block.append(lines[i].strip())
        i -= 1
    assert f"# TODO(tern): {construct}: {reason}" in block, (line, block)


def test_json_report_lists_every_edit_and_todo(tmp_path):
    pkg = make_pkg(tmp_path, residue=True)
    out = tmp_path / "out" / "mypkg"
    result = tern_inproc("migrate", pkg, "--out", out, "-q")
    report = report_of(out)

    assert report["exit_code"] == result.exit_code == 1
    assert Path(report["source"]) == pkg.resolve() and Path(report["out"]) == out.resolve()
    assert report["totals"]["files"] == len(report["files"]) == len(tree_bytes(pkg))
    assert report["totals"]["edits"] == sum(len(f["edits"]) for f in report["files"]) > 0
    assert report["totals"]["todos"] == sum(len(f["todos"]) for f in report["files"]) > 0
    rules = set()
    for f in report["files"]:
        for edit in f["edits"]:
            assert isinstance(edit["rule"], str) and edit["rule"], edit
            assert "before" in edit and "after" in edit
            rules.add(edit["rule"])
    assert any("reduce_sum" in r for r in rules), rules
    constructs = []
    for f in report["files"]:
        for todo in f["todos"]:
            assert f["path"] and (out / f["path"]).is_file()
            assert isinstance(todo["line"], int) and todo["construct"] and todo["reason"], todo
            _code_after_todo((out / f["path"]).read_text().splitlines(), todo["line"], todo["construct"], todo["reason"])
            constructs.append((f["path"], todo["construct"]))
    assert ("sub/raw.py", "tf.raw_ops.Foo") in constructs
    foo = next(t for f in report["files"] for t in f["todos"] if t["construct"] == "tf.raw_ops.Foo")
    assert (out / "sub/raw.py").read_text().splitlines()[foo["line"] - 1].strip() == "y = tf.raw_ops.Foo(x)"


def test_json_report_stacked_todos_point_at_the_code(tmp_path):
    # Two untranslatable calls in one statement: two comment lines above it; both TODOs
    # must give the line of the statement, not of the comment below theirs.
    two = "import tensorflow as tf\n\n\ndef f(x):\n    y = tf.raw_ops.Foo(x) + tf.raw_ops.Bar(x)\n    return y\n"
    pkg = make_pkg(tmp_path, extra={"two.py": two})
    out = tmp_path / "out" / "mypkg"
    assert tern_inproc("migrate", pkg, "--out", out, "-q").exit_code == 1
    (entry,) = [f for f in report_of(out)["files"] if f["path"] == "two.py"]
    lines = (out / "two.py").read_text().splitlines()
    stmt = next(i for i, ln in enumerate(lines, 1) if ln.strip().startswith("y = "))
    calls = {t["construct"]: t["line"] for t in entry["todos"] if t["construct"].startswith("tf.raw_ops.")}
    assert calls == {"tf.raw_ops.Foo": stmt, "tf.raw_ops.Bar": stmt}, (calls, lines)
    for todo in entry["todos"]:
        _code_after_todo(lines, todo["line"], todo["construct"], todo["reason"])


def test_markdown_report_lists_the_todo(tmp_path):
    pkg = make_pkg(tmp_path, residue=True)
    out = tmp_path / "out" / "mypkg"
    tern_inproc("migrate", pkg, "--out", out, "-q")
    md = out.with_name("mypkg.tern-report.md").read_text()
    foo = next(t for f in report_of(out)["files"] for t in f["todos"] if t["construct"] == "tf.raw_ops.Foo")
    assert md.startswith("# Tern migration report")
    row = next((ln for ln in md.splitlines() if f"`sub/raw.py:{foo['line']}`" in ln), None)
    assert row is not None, md
    assert "tf.raw_ops.Foo" in row and foo["reason"] in row
    assert "`sub/raw.py`" in md and "residue" in md and "reduce_sum" in md


def test_report_option_chooses_the_report_stem(tmp_path):
    pkg = make_pkg(tmp_path, residue=True)
    out = tmp_path / "out" / "mypkg"
    stem = tmp_path / "reports" / "run1"
    result = tern_inproc("migrate", pkg, "--out", out, "--report", stem, "-q")
    assert result.exit_code == 1
    assert json.loads(stem.with_suffix(".json").read_text())["totals"]["todos"] >= 1
    assert "tf.raw_ops.Foo" in stem.with_suffix(".md").read_text()
    assert not out.with_name("mypkg.tern-report.json").exists()


# ---------------------------------------------------------------------------- idempotency


def test_second_run_into_same_out_changes_nothing(tmp_path):
    pkg = make_pkg(tmp_path, residue=True)
    out_root = tmp_path / "out"
    out = out_root / "mypkg"
    first = tern_inproc("migrate", pkg, "--out", out, "-q")
    age(out_root)  # old mtimes: any rewrite, even an identical one, would show
    before_bytes, before_stats = tree_bytes(out_root), tree_stats(out_root)

    second = tern_inproc("migrate", pkg, "--out", out, "-q")

    assert second.exit_code == first.exit_code == 1
    assert tree_bytes(out_root) == before_bytes
    assert tree_stats(out_root) == before_stats, "files (or reports) were rewritten"


def test_running_on_its_own_output_changes_nothing(tmp_path):
    pkg = make_pkg(tmp_path, residue=True)
    once = tmp_path / "once" / "mypkg"
    twice = tmp_path / "twice" / "mypkg"
    tern_inproc("migrate", pkg, "--out", once, "-q")

    tern_inproc("migrate", once, "--out", twice, "-q")

    first, second = tree_bytes(once), tree_bytes(twice)
    assert set(first) == set(second)
    changed = {rel: second[rel].decode(errors="replace") for rel in first if first[rel] != second[rel]}
    assert not changed, f"a second pass changed {sorted(changed)}:\n" + "\n".join(changed.values())
    assert report_of(twice)["totals"]["edits"] == 0


# ---------------------------------------------------------------------------- modes


def test_dry_run_prints_diff_and_writes_nothing(tmp_path):
    pkg = make_pkg(tmp_path, residue=True)
    before = tree_hash(pkg)
    out = tmp_path / "out" / "mypkg"
    listing = sorted(p.name for p in tmp_path.iterdir())

    proc = tern("migrate", pkg, "--out", out, "--dry-run")

    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "--- a/ops.py\n+++ b/ops.py\n" in proc.stdout
    assert "-    return tf.reduce_sum(x, axis=1)\n+    return jnp.sum(x, axis=1)\n" in proc.stdout
    assert "--- a/sub/raw.py\n+++ b/sub/raw.py\n" in proc.stdout
    assert "+    # TODO(tern): tf.raw_ops.Foo" in proc.stdout
    assert "a/sub/util.py" not in proc.stdout and "README" not in proc.stdout  # unchanged files: no diff
    assert not out.exists() and not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == listing, "something was written beside the source"
    assert tree_hash(pkg) == before


def test_dry_run_without_out_writes_no_default_directory(tmp_path):
    pkg = make_pkg(tmp_path)
    result = tern_inproc("migrate", pkg, "--dry-run")
    assert result.exit_code == 0
    assert "+++ b/ops.py" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mypkg"]


def test_in_place_rewrites_only_changed_py_files(tmp_path):
    pkg = make_pkg(tmp_path, residue=True)
    age(pkg)
    before_bytes, before_stats = tree_bytes(pkg), tree_stats(pkg)

    proc = tern("migrate", pkg, "--in-place", "-q")

    assert proc.returncode == 1, proc.stdout + proc.stderr
    after_bytes, after_stats = tree_bytes(pkg), tree_stats(pkg)
    assert set(after_bytes) == set(before_bytes), "files added to or removed from the source tree"
    ops = (pkg / "ops.py").read_text()
    assert "return jnp.sum(x, axis=1)" in ops and "tensorflow" not in ops, ops
    assert "# TODO(tern): tf.raw_ops.Foo" in (pkg / "sub/raw.py").read_text()
    rewritten = {rel for rel in before_stats if after_stats[rel] != before_stats[rel]}
    assert rewritten == {"ops.py", "sub/raw.py"}
    for rel in set(before_bytes) - rewritten:
        assert after_bytes[rel] == before_bytes[rel], rel
    assert not list(tmp_path.rglob("*.tern-tmp"))


def test_in_place_with_out_is_refused(tmp_path):
    pkg = make_pkg(tmp_path)
    before = tree_stats(pkg)
    result = tern_inproc("migrate", pkg, "--in-place", "--out", tmp_path / "x")
    assert result.exit_code == 2
    assert "--in-place" in result.stderr and "--out" in result.stderr
    assert not (tmp_path / "x").exists() and tree_stats(pkg) == before


def _ten_file_pkg(tmp_path: Path) -> Path:
    files: dict[str, str | bytes] = {"__init__.py": "", "README.txt": README, "sub/__init__.py": ""}
    for i in range(4):
        files[f"ops{i}.py"] = OPS.replace("total", f"total{i}")
        files[f"sub/raw{i}.py"] = RAW.replace("def f", f"def f{i}")
    files["sub/util.py"] = PLAIN
    files["layers.py"] = "import tensorflow as tf\n\n\ndef make():\n    return tf.keras.layers.Dense(4)\n"
    files["broken.py"] = "def f(:\n    pass\n"
    return make_tree(tmp_path / "mypkg", files)


def test_jobs_2_gives_the_same_tree_and_report_as_jobs_1(tmp_path):
    pkg = _ten_file_pkg(tmp_path)
    assert len([p for p in pkg.rglob("*.py")]) >= 10
    one, two = tmp_path / "j1" / "mypkg", tmp_path / "j2" / "mypkg"

    p1 = tern("migrate", pkg, "--out", one, "-j", "1", "-q")
    p2 = tern("migrate", pkg, "--out", two, "-j", "2", "-q")

    assert p1.returncode == p2.returncode == 2, p1.stderr + p2.stderr
    assert tree_bytes(one) == tree_bytes(two)
    r1, r2 = report_of(one), report_of(two)
    assert r1["totals"] == r2["totals"]
    assert r1["files"] == r2["files"]  # same order, same edits, same TODOs
    assert not list(tmp_path.rglob("*.tern-tmp"))


# ---------------------------------------------------------------------------- failures


def test_missing_path_exits_2_with_a_clear_message(tmp_path):
    missing = tmp_path / "no_such_pkg"
    result = tern_inproc("migrate", missing, "--out", tmp_path / "out")
    assert result.exit_code == 2
    message = result.stderr.replace("\n", "")  # rich may wrap long paths
    assert "no such file or directory" in message.lower() and str(missing) in message
    assert "Traceback" not in result.output
    assert sorted(tmp_path.iterdir()) == []


def test_no_temp_files_left_after_a_run(tmp_path):
    pkg = make_pkg(tmp_path, residue=True, extra={"broken.py": "def f(:\n"})
    out = tmp_path / "out" / "mypkg"
    tern_inproc("migrate", pkg, "--out", out, "-q")
    tern_inproc("migrate", pkg, "--out", out, "-q")  # second run: over existing files
    (pkg / "ops.py").write_text(OPS + "\n\ndef mean(x):\n    return tf.reduce_sum(x) / 2\n")
    tern_inproc("migrate", pkg, "--out", out, "-q")  # a changed file replaced in place
    leftovers = [p for p in tmp_path.rglob("*") if p.name.endswith(".tern-tmp")]
    assert leftovers == []
    assert "jnp.sum(x) / 2" in (out / "ops.py").read_text()


# ---------------------------------------------------------------------------- start-up


def test_cli_imports_neither_tensorflow_nor_jax(tmp_path):
    pkg = make_pkg(tmp_path, residue=True)
    code = (
        "import tern.cli, tern.engine.runner, tern.engine.translate, sys; "
        "assert 'tensorflow' not in sys.modules and 'jax' not in sys.modules, "
        "sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'jax', 'keras', 'flax')); "
        # a whole run (pre-pass, rules, report) must not import them either
        "from pathlib import Path; tern.engine.runner.migrate(Path(sys.argv[1]), dry_run=True); "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'jax', 'keras', 'flax')); "
        "assert not bad, bad"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(pkg)], capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr


def test_help_shows_the_config_tables_it_names():
    """Rich reads ``[tool.tern.x]`` in a help text as markup and drops it unless escaped: every
    option's help must show the configuration table it names."""
    import click
    import typer.main

    def commands(group: click.Command, path: tuple[str, ...] = ()):
        yield path, group
        for name, sub in getattr(group, "commands", {}).items():
            yield from commands(sub, (*path, name))

    checked = 0
    for path, command in commands(typer.main.get_command(app)):
        tables = {t for p in command.params for t in re.findall(r"\[tool\.tern(?:\.\w+)?\]", p.help or "")}
        if not tables:
            continue
        shown = CliRunner().invoke(app, [*path, "--help"], terminal_width=400, env={"COLUMNS": "400"}).output
        for table in tables:
            assert table in shown, f"tern {' '.join(path)} --help drops {table}"
        checked += 1
    assert checked >= 4  # verify, eval, weights, pr, migrate's --llm options
