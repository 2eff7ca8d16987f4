"""``tern migrate`` does no harm: each fault a hostile but fair user found, through the real CLI.

Every test builds a small tree in tmp_path, runs ``python -m tern migrate`` in a subprocess
and checks the exit code, the one-line reason on stderr (never a traceback), what was
written and what was not (the source's bytes unchanged).

The tests run as root here, where chmod does not stop a read or a write. Where a
permission must really be denied, the subprocess runs without CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH (dropped from its bounding set before exec): root that obeys file
modes, as any other user does. Without the right to drop them, those tests are skipped.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tern.engine.report import ReportError, read_report

ROOT = Path(__file__).resolve().parents[1]
OPS = "import tensorflow as tf\n\ndef f(x):\n    return tf.reduce_sum(x)\n"
OPS_JAX = "import jax.numpy as jnp\n\ndef f(x):\n    return jnp.sum(x)\n"
UTIL = "def helper(n):\n    return n + 1\n"


# ---------------------------------------------------------------------------- helpers


def make_pkg(tmp_path: Path, extra: dict[str, str | bytes] | None = None) -> Path:
    files: dict[str, str | bytes] = {"__init__.py": "", "ops.py": OPS, "sub/__init__.py": "", "sub/util.py": UTIL}
    files.update(extra or {})
    root = tmp_path / "mypkg"
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    return root


def snapshot(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every path under root (links not followed): a link's target, a file's bytes, or the kind."""
    out: dict[str, tuple[str, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            info = os.lstat(path)
            rel = path.relative_to(root).as_posix()
            if stat.S_ISLNK(info.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                out[rel] = ("file", path.read_bytes() if info.st_mode & 0o444 else b"<unreadable>")
            else:
                out[rel] = ("dir" if stat.S_ISDIR(info.st_mode) else "special", "")
    return out


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _obey_file_modes() -> None:
    """preexec_fn: drop CAP_DAC_OVERRIDE (1) and CAP_DAC_READ_SEARCH (2) from the bounding set
    (PR_CAPBSET_DROP, 24), so that root after exec is refused what the file modes refuse."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):
        if libc.prctl(24, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_CAPBSET_DROP")


def tern(*args: str | Path, obey_modes: bool = False, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tern", *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                          env=_env(), timeout=timeout, preexec_fn=_obey_file_modes if obey_modes else None)


@pytest.fixture
def modes_obeyed(tmp_path: Path) -> None:
    """Skip unless a subprocess can be made to obey file modes (see the module docstring)."""
    probe = tmp_path / "probe"
    probe.write_text("x")
    probe.chmod(0)
    try:
        proc = subprocess.run([sys.executable, "-c", f"open({str(probe)!r}).read()"], capture_output=True,
                              preexec_fn=_obey_file_modes, timeout=60)
    except subprocess.SubprocessError:
        proc = None
    finally:
        probe.unlink()
    if proc is None or proc.returncode == 0:
        pytest.skip("cannot run a process that obeys file modes here (no CAP_SETPCAP)")


def assert_usage_error(proc: subprocess.CompletedProcess, *words: str) -> None:
    """Exit 2, exactly one line on stderr holding the words, no traceback, nothing on stdout."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


def stderr_line(proc: subprocess.CompletedProcess, path: Path) -> str:
    """The one stderr line about path (``error: PATH: reason`` or ``note: ...``)."""
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.split(": ", 1)[-1].startswith(f"{path}:")]
    assert len(lines) == 1, f"no single stderr line about {path}:\n{proc.stderr}"
    return lines[0]


def report_of(out: Path) -> dict:
    return json.loads(out.with_name(out.name + ".tern-report.json").read_text())


def entry(out: Path, rel: str) -> dict:
    (found,) = [f for f in report_of(out)["files"] if f["path"] == rel]
    return found


def assert_rest_translated(out: Path) -> None:
    assert (out / "ops.py").read_text() == OPS_JAX
    assert (out / "sub/util.py").read_text() == UTIL


# ---------------------------------------------------------------------------- the source is never harmed


@pytest.mark.parametrize("where", ["same", "inside", "nested", "contains", "symlink"])
def test_out_that_is_in_or_holds_the_source_is_refused(tmp_path, where):
    pkg = make_pkg(tmp_path)
    (tmp_path / "link").symlink_to(pkg)
    out = {"same": pkg, "inside": pkg / "jaxout", "nested": pkg / "sub" / "jaxout" / "jaxout", "contains": tmp_path,
           "symlink": tmp_path / "link"}[where]
    before, listing = snapshot(pkg), sorted(p.name for p in tmp_path.iterdir())

    proc = tern("migrate", pkg, "--out", out)

    what = {"same": "is the source", "symlink": "is the source", "contains": "contains the source"}.get(where, "is inside the source")
    assert_usage_error(proc, "--out", what, "--in-place")
    assert snapshot(pkg) == before, "the source was modified"
    assert sorted(p.name for p in tmp_path.iterdir()) == listing, "something was written beside the source"


def test_in_place_is_still_allowed(tmp_path):
    pkg = make_pkg(tmp_path)
    proc = tern("migrate", pkg, "--in-place", "-q")
    assert proc.returncode == 0, proc.stderr
    assert (pkg / "ops.py").read_text() == OPS_JAX


def test_report_inside_the_source_is_refused(tmp_path):
    pkg = make_pkg(tmp_path)
    before, listing = snapshot(pkg), sorted(p.name for p in tmp_path.iterdir())

    proc = tern("migrate", pkg, "--out", tmp_path / "out" / "mypkg", "--report", pkg / "sub" / "run1")

    assert_usage_error(proc, "--report", "inside the source")
    assert snapshot(pkg) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == listing, "the output was written before the refusal"


# ---------------------------------------------------------------------------- symlinks and special files


def test_symlink_loop_is_an_error_of_its_own(tmp_path):
    pkg = make_pkg(tmp_path)
    (pkg / "loop_a.py").symlink_to("loop_b.py")
    (pkg / "loop_b.py").symlink_to("loop_a.py")
    before = snapshot(pkg)
    out = tmp_path / "out" / "mypkg"

    proc = tern("migrate", pkg, "--out", out, "-q")

    assert proc.returncode == 2, proc.stderr
    for name, target in (("loop_a.py", "loop_b.py"), ("loop_b.py", "loop_a.py")):
        line = stderr_line(proc, pkg / name)
        assert line.startswith("error: ") and target in line and "ELOOP" in line, line
        assert entry(out, name)["status"] == "error" and "ELOOP" in entry(out, name)["error"]
        assert not os.path.lexists(out / name)
    assert_rest_translated(out)
    assert snapshot(pkg) == before


def test_dangling_symlink_is_an_error_and_the_rest_is_written(tmp_path):
    pkg = make_pkg(tmp_path)
    (pkg / "gone.py").symlink_to("moved_away.py")
    out = tmp_path / "out" / "mypkg"

    proc = tern("migrate", pkg, "--out", out, "-q")

    assert proc.returncode == 2, proc.stderr
    line = stderr_line(proc, pkg / "gone.py")
    assert "dangling symlink to moved_away.py" in line and "ENOENT" in line, line
    assert entry(out, "gone.py")["status"] == "error"
    assert not os.path.lexists(out / "gone.py")
    assert_rest_translated(out)


def test_symlink_out_of_the_package_is_reported_not_copied(tmp_path):
    secret = tmp_path / "elsewhere" / "secrets.py"
    secret.parent.mkdir()
    secret.write_text("TOKEN = 'do not copy me'\n")
    pkg = make_pkg(tmp_path)
    (pkg / "shared.py").symlink_to(secret)
    (pkg / "inside.py").symlink_to("ops.py")  # a link within the package is translated as its target
    before = snapshot(pkg)
    out = tmp_path / "out" / "mypkg"

    proc = tern("migrate", pkg, "--out", out, "-q")

    assert proc.returncode == 2, proc.stderr
    line = stderr_line(proc, pkg / "shared.py")
    assert str(secret) in line and "outside the package" in line, line
    assert entry(out, "shared.py")["status"] == "error" and str(secret) in entry(out, "shared.py")["error"]
    assert not os.path.lexists(out / "shared.py")
    assert not any(b"do not copy me" in p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert (out / "inside.py").read_text() == OPS_JAX
    assert_rest_translated(out)
    assert snapshot(pkg) == before


def test_fifo_named_like_a_module_is_skipped_never_opened(tmp_path):
    pkg = make_pkg(tmp_path)
    os.mkfifo(pkg / "m.py")  # opening it to read would wait for a writer forever
    out = tmp_path / "out" / "mypkg"

    proc = tern("migrate", pkg, "--out", out, "-q", timeout=120)

    assert proc.returncode == 0, proc.stderr  # nothing in it to translate: a note, not an error
    line = stderr_line(proc, pkg / "m.py")
    assert line.startswith("note: ") and "FIFO" in line and "skipped" in line, line
    skipped = entry(out, "m.py")
    assert skipped["status"] == "skipped" and skipped["notes"][0]["construct"] == "FIFO"
    assert not os.path.lexists(out / "m.py")
    assert stat.S_ISFIFO(os.lstat(pkg / "m.py").st_mode)
    assert_rest_translated(out)


def test_unreadable_file_is_an_error_of_its_own(tmp_path, modes_obeyed):
    """A chmod 000 module read by a process that obeys file modes: EACCES, as for any user
    but root (it stands for every file the OS refuses to read: EACCES, EIO, ...)."""
    pkg = make_pkg(tmp_path, extra={"locked.py": OPS})
    (pkg / "locked.py").chmod(0)
    out = tmp_path / "out" / "mypkg"

    proc = tern("migrate", pkg, "--out", out, "-q", obey_modes=True)

    assert proc.returncode == 2, proc.stderr
    line = stderr_line(proc, pkg / "locked.py")
    assert "cannot be read" in line and "EACCES" in line, line
    assert entry(out, "locked.py")["status"] == "error"
    assert not (out / "locked.py").exists()
    assert_rest_translated(out)


# ---------------------------------------------------------------------------- the output


def test_output_path_blocked_by_a_file_is_an_error_of_its_own(tmp_path):
    pkg = make_pkg(tmp_path)
    out = tmp_path / "out" / "mypkg"
    out.mkdir(parents=True)
    (out / "sub").write_text("a file where the sub-package goes\n")

    proc = tern("migrate", pkg, "--out", out, "-q")

    assert proc.returncode == 2, proc.stderr
    for rel in ("sub/__init__.py", "sub/util.py"):
        line = stderr_line(proc, pkg / rel)
        assert f"cannot write {out / rel}" in line and f"{out / 'sub'} is in the way" in line, line
        assert entry(out, rel)["status"] == "error"
    assert (out / "sub").read_text() == "a file where the sub-package goes\n"
    assert (out / "ops.py").read_text() == OPS_JAX
    assert report_of(out)["exit_code"] == 2


def test_symlink_in_the_output_tree_never_leads_a_write_into_the_source(tmp_path):
    pkg = make_pkg(tmp_path)
    out = tmp_path / "out" / "mypkg"
    out.mkdir(parents=True)
    (out / "sub").symlink_to(pkg / "sub")  # left by hand, or by another tool
    before = snapshot(pkg)

    proc = tern("migrate", pkg, "--out", out, "-q")

    assert proc.returncode == 2, proc.stderr
    line = stderr_line(proc, pkg / "sub" / "util.py")
    assert "leads into the source" in line, line
    assert snapshot(pkg) == before
    assert (out / "ops.py").read_text() == OPS_JAX and report_of(out)["exit_code"] == 2


def test_output_under_a_regular_file_is_refused_before_writing(tmp_path):
    pkg = make_pkg(tmp_path)
    (tmp_path / "notes.txt").write_text("not a directory\n")
    listing = sorted(p.name for p in tmp_path.iterdir())

    proc = tern("migrate", pkg, "--out", tmp_path / "notes.txt" / "out" / "mypkg")

    assert_usage_error(proc, "cannot be written", f"{tmp_path / 'notes.txt'} is not a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == listing


def test_report_under_a_regular_file_is_refused_before_writing(tmp_path):
    pkg = make_pkg(tmp_path)
    (tmp_path / "notes.txt").write_text("not a directory\n")
    out = tmp_path / "out" / "mypkg"

    proc = tern("migrate", pkg, "--out", out, "--report", tmp_path / "notes.txt" / "run1")

    assert_usage_error(proc, "--report", "is not a directory")
    assert not (tmp_path / "out").exists()


def test_read_only_output_is_refused_before_writing(tmp_path, modes_obeyed):
    pkg = make_pkg(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)

    proc = tern("migrate", pkg, "--out", locked / "mypkg", obey_modes=True)

    assert_usage_error(proc, "cannot be written", "permission denied")
    assert list(locked.iterdir()) == []


def test_read_only_output_subdirectory_is_an_error_of_its_own(tmp_path, modes_obeyed):
    pkg = make_pkg(tmp_path)
    out = tmp_path / "out" / "mypkg"
    (out / "sub").mkdir(parents=True)
    (out / "sub").chmod(0o555)

    proc = tern("migrate", pkg, "--out", out, "-q", obey_modes=True)

    assert proc.returncode == 2, proc.stderr
    line = stderr_line(proc, pkg / "sub" / "util.py")
    assert f"cannot write {out / 'sub/util.py'}" in line and "EACCES" in line, line
    assert (out / "ops.py").read_text() == OPS_JAX and report_of(out)["exit_code"] == 2


def test_output_keeps_the_source_file_modes(tmp_path):
    pkg = make_pkg(tmp_path, extra={"tool.py": "#!/usr/bin/env python\n" + OPS, "data.txt": "private\n"})
    (pkg / "tool.py").chmod(0o755)
    (pkg / "data.txt").chmod(0o640)
    (pkg / "ops.py").chmod(0o644)
    out = tmp_path / "out" / "mypkg"

    proc = tern("migrate", pkg, "--out", out, "-q")

    assert proc.returncode == 0, proc.stderr
    modes = {rel: stat.S_IMODE((out / rel).stat().st_mode) for rel in ("tool.py", "data.txt", "ops.py")}
    assert modes == {"tool.py": 0o755, "data.txt": 0o640, "ops.py": 0o644}
    umask = os.umask(0)
    os.umask(umask)
    for report in out.parent.glob("mypkg.tern-report.*"):
        assert stat.S_IMODE(report.stat().st_mode) == 0o666 & ~umask, report  # as open() makes them, not 0600


def test_stale_temporary_files_are_removed_by_the_next_run(tmp_path):
    """What a run killed mid-write leaves: ``.<name>.<random>.tern-tmp`` beside its target."""
    pkg = make_pkg(tmp_path)
    out = tmp_path / "out" / "mypkg"
    assert tern("migrate", pkg, "--out", out, "-q").returncode == 0
    stale = [out / ".ops.py.k3j9x1ab.tern-tmp", out / "sub" / ".util.py.q0w9e8r7.tern-tmp",
             out.parent / ".mypkg.tern-report.json.a1b2c3d4.tern-tmp", pkg / ".ops.py.z9y8x7w6.tern-tmp"]
    for path in stale:
        path.write_text("half a file")

    first = tern("migrate", pkg, "--out", out, "-q")
    in_place = tern("migrate", pkg, "--in-place", "-q")

    assert first.returncode == in_place.returncode == 0, first.stderr + in_place.stderr
    assert [p for p in stale if p.exists()] == []
    assert "tern-tmp" not in json.dumps(report_of(out))  # never listed as a file of the package


# ---------------------------------------------------------------------------- encodings


def test_utf8_bom_is_kept(tmp_path):
    bom = b"\xef\xbb\xbf"
    pkg = make_pkg(tmp_path, extra={"bom.py": bom + OPS.encode(), "plain_bom.py": bom + UTIL.encode()})
    out = tmp_path / "out" / "mypkg"

    proc = tern("migrate", pkg, "--out", out, "-q")

    assert proc.returncode == 0, proc.stderr
    assert (out / "bom.py").read_bytes() == bom + OPS_JAX.encode()
    assert (out / "plain_bom.py").read_bytes() == bom + UTIL.encode()


def test_declared_latin1_file_is_translated_and_written_back_in_latin1(tmp_path):
    source = ("# -*- coding: latin-1 -*-\nimport tensorflow as tf\n\n\ndef f(x):\n"
              "    \"\"\"Somme des entrées, café compris.\"\"\"\n    return tf.reduce_sum(x)\n").encode("latin-1")
    pkg = make_pkg(tmp_path, extra={"latin.py": source})
    out = tmp_path / "out" / "mypkg"

    proc = tern("migrate", pkg, "--out", out, "-q")

    assert proc.returncode == 0, proc.stderr
    assert entry(out, "latin.py")["status"] == "translated"
    data = (out / "latin.py").read_bytes()
    assert b"entr\xe9es, caf\xe9 compris" in data  # latin-1 bytes, not UTF-8's \xc3\xa9
    text = data.decode("latin-1")
    assert text.startswith("# -*- coding: latin-1 -*-\n") and "jnp.sum(x)" in text and "tensorflow" not in text
    compile(data, "latin.py", "exec")  # Python reads it as declared
    assert (pkg / "latin.py").read_bytes() == source


def test_translation_that_the_declared_encoding_cannot_hold_is_an_error(tmp_path, monkeypatch):
    """No rule writes non-ASCII today; a future one must not write a file its own coding line
    contradicts (in-process: a stand-in translation adds the character)."""
    from tern.engine import runner
    from tern.engine.package import PackageInfo
    from tern.engine.translate import translate_module

    def with_arrow(module, **kwargs):
        result = translate_module(module, **kwargs)
        result.code = result.code.replace("jnp.sum(x)", "jnp.sum(x)  # \u2192 sum")
        return result

    monkeypatch.setattr(runner, "translate_module", with_arrow)
    source = b"# coding: latin-1\nimport tensorflow as tf\n\ndef f(x):\n    return tf.reduce_sum(x)\n"
    (tmp_path / "m.py").write_bytes(source)

    result, data = runner.translate_file(runner.Job("m.py", tmp_path / "m.py", PackageInfo()))

    assert result.status == "error" and "iso-8859-1" in result.error and result.error_line == 5, result
    assert data == source  # copied unchanged


# ---------------------------------------------------------------------------- clean deaths


def _children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(name))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the workers in /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_killed_parallel_run_leaves_no_workers(tmp_path, sig):
    body = "".join(f"\ndef f{i}(x):\n    y = tf.reduce_sum(x, axis=1)\n    return tf.nn.relu(y) + tf.reduce_mean(x)\n"
                   for i in range(40))
    pkg = make_pkg(tmp_path, extra={f"mod{i}.py": "import tensorflow as tf\n" + body for i in range(24)})
    out = tmp_path / "out" / "mypkg"
    proc = subprocess.Popen([sys.executable, "-m", "tern", "migrate", pkg, "--out", out, "-j", "2", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env())
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 240
        while len(workers := _children(proc.pid)) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None and len(workers) >= 2, "the pool never started"
        time.sleep(0.5)
        assert proc.poll() is None, "the run ended before it could be killed: give it more work"

        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)

        deadline = time.monotonic() + 15
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "pool workers outlived the run"
    finally:  # a failure here must not leave the processes this test started behind
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for worker in workers:
            if _alive(worker):
                os.kill(worker, signal.SIGKILL)
    if sig == signal.SIGTERM:
        assert proc.returncode == 143, stderr
        assert "Traceback" not in stderr and len(stderr.splitlines()) == 1 and "interrupted" in stderr, stderr
    else:
        assert proc.returncode == -signal.SIGKILL
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tern-tmp")]


_KILLED_MID_SEND = """
from pathlib import Path
from tern.engine import runner
from tern.engine.package import PackageInfo
from tern.engine.parallel import Workers

def huge(job, parsed):  # every result is tens of megabytes: a worker is killed while sending one
    return job.rel, b"x" * 40_000_000

def progress(results, total):
    for _ in results:
        raise KeyboardInterrupt  # the first result is in; the other worker is still sending its own

work = [runner.Job(f"m{i}.py", Path(f"/nonexistent/m{i}.py"), None) for i in range(6)]
try:
    with Workers(work, 2, translate=huge, parse=runner.parse_ahead) as workers:
        workers.results(PackageInfo(), progress)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked pool workers")
def test_an_interrupt_while_a_worker_sends_its_result_does_not_hang_the_exit(tmp_path):
    """A worker killed halfway through a result left the pool's manager thread waiting for the
    rest, and the interpreter's exit joined that thread forever (seen once in CI as a SIGTERMed
    ``-j 2`` run that never ended)."""
    script = tmp_path / "mid_send.py"
    script.write_text(_KILLED_MID_SEND)
    try:
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT,
                              env=_env(), timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("the interrupted run never exited")
    assert (proc.returncode, proc.stdout) == (0, "interrupted\n"), proc.stderr


# ---------------------------------------------------------------------------- reports


def test_report_that_is_not_an_object_is_a_one_line_error(tmp_path):
    path = tmp_path / "mypkg.tern-report.json"
    for text, words in (("[1, 2]", "a JSON array, not an object"), ('"x"', "a JSON string"),
                        ("{not json", "not a readable tern migrate report"), ('{"files": []}', 'no "source"')):
        path.write_text(text)
        with pytest.raises(ReportError) as caught:
            read_report(path)
        message = str(caught.value)
        assert "\n" not in message and str(path) in message and words in message, message
    path.write_text(json.dumps({"source": "/src/mypkg", "files": []}))
    assert read_report(path)["source"] == "/src/mypkg"


def test_verify_with_a_report_that_is_a_json_list_exits_2(tmp_path):
    out = tmp_path / "out" / "mypkg"
    out.mkdir(parents=True)
    (out / "__init__.py").write_text("")
    out.with_name("mypkg.tern-report.json").write_text("[1, 2]\n")

    proc = subprocess.run([sys.executable, "-m", "tern", "verify", out], capture_output=True, text=True, cwd=ROOT,
                          env=_env(), timeout=300)

    assert_usage_error(proc, "mypkg.tern-report.json", "not an object")
