"""The support module tern writes into every translated package, and tern as a user installs it.

* The generated ``_keras_compat.py`` copies tern's support package (``rules/support``,
  installed as ``tern_rules.support``) definition by definition, and holds exactly what the
  package's files import and what that uses.
* Translated files import what they use from it and paste nothing; a rerun keeps it; a
  package that needs none gets none; a user's file of that name is never overwritten.
* A built wheel carries the support package and every dependency ``tern migrate --verify``
  needs: installed into a fresh virtualenv, it translates a training fixture whose result
  imports and passes its tests with TensorFlow unimportable.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tern.engine import support_module
from tern.engine.support_module import FILE_NAME, MARKER, closure, definitions, module_text

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures" / "tf"

#: run before anything else in a child interpreter: TensorFlow and Keras cannot be imported
BLOCK_TF = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "keras", "tf_keras"):
            raise ImportError(f"{name} is blocked: the translation must not need it")
sys.meta_path.insert(0, _Block())
"""


def _top_level(text: str) -> dict[str, str]:
    """Each top-level definition of a module by name, as written (comments right above it included)."""
    lines = text.splitlines()
    out = {}
    for node in ast.parse(text).body:
        names = ([node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                 else [t.id for t in node.targets] if isinstance(node, ast.Assign)
                 else [node.target.id] if isinstance(node, ast.AnnAssign) else [])
        start = min([node.lineno, *[d.lineno for d in getattr(node, "decorator_list", ())]]) - 1
        while start > 0 and lines[start - 1].lstrip().startswith("#"):
            start -= 1
        for name in names:
            out[name] = "\n".join(lines[start:node.end_lineno]) + "\n"
    return out


def _support_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [a.name for n in tree.body if isinstance(n, ast.ImportFrom) and (n.module or "").endswith(support_module.SUPPORT_MODULE)
            for a in n.names]


# -- the generated module is the support package's code ----------------------------------


def test_the_generated_module_copies_each_definition_of_the_support_package_exactly():
    table = definitions()
    text = module_text(table)
    assert text.splitlines()[0] == MARKER
    written = _top_level(text)
    assert set(written) == set(table)
    for name, definition in table.items():
        source = _top_level((support_module.support_root() / f"{definition.file}.py").read_text(encoding="utf-8"))
        assert written[name] == source[name], f"{name} differs from rules/support/{definition.file}.py"
    imports = [ast.get_source_segment(text, n) for n in ast.parse(text).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not [s for s in imports if "tern" in s], "the generated module must not import tern"
    bound = [a.asname or a.name.split(".")[0] for n in ast.parse(text).body if isinstance(n, ast.Import) for a in n.names]
    assert all(name in ("jax", "flax", "optax", "numpy", "orbax") or name in sys.stdlib_module_names for name in bound), bound


def test_every_support_name_is_defined_once_and_support_modules_hold_only_definitions():
    # definitions() raises on a name defined twice or a statement that is not a definition
    table = definitions()
    assert {"KerasTrainState", "keras_loss", "_tern_apply", "_TERN_VARIABLES"} <= set(table)
    for definition in table.values():
        assert set(definition.uses) <= set(table), definition.name


def test_the_closure_is_what_a_definition_uses_in_turn_each_after_what_it_uses():
    assert closure({"keras_mean_squared_error"}) == ["keras_same_rank", "keras_mean_squared_error"]
    order = closure({"_tern_train"})
    assert {"_TERN_VARIABLES", "_tern_variables", "KerasTrainState", "_tern_train_state"} <= set(order)
    for position, name in enumerate(order):
        later = [used for used in definitions()[name].uses if order.index(used) > position]
        assert all(name in closure({used}) for used in later), f"{name} comes before {later}, which it uses"
    with pytest.raises(KeyError):
        closure({"no_such_definition"})


def test_the_whole_generated_module_imports_without_tensorflow(tmp_path):
    (tmp_path / FILE_NAME).write_text(module_text(definitions()), encoding="utf-8")
    code = BLOCK_TF + f"import {support_module.SUPPORT_MODULE} as m\nprint(len([n for n in dir(m) if not n.startswith('__')]))\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


# -- what tern migrate writes ------------------------------------------------------------


def _migrate(*args: str, cwd: Path = ROOT, tern: list[str] | None = None) -> subprocess.CompletedProcess:
    command = tern or [sys.executable, "-m", "tern"]
    return subprocess.run([*command, "migrate", *args, "-q"], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_a_package_gets_one_support_module_holding_exactly_what_its_files_import(tmp_path):
    out = tmp_path / "train_custom_loop"
    proc = _migrate(str(FIXTURES / "train_custom_loop"), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    imported = {}
    for path in sorted(out.rglob("*.py")):
        if path.name == FILE_NAME:
            continue
        text = path.read_text(encoding="utf-8")
        assert "Generated by tern" not in text and "_TERN_VARIABLES = {}" not in text, f"support pasted into {path.name}"
        names = _support_imports(path)
        imported[path.name] = names
        used = {n.id for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Name)}
        assert set(names) <= used, f"{path.name} imports support it does not use"
    assert "from train_custom_loop._keras_compat import" in (out / "train_test.py").read_text()
    wanted = {n for names in imported.values() for n in names}
    generated = _top_level((out / FILE_NAME).read_text(encoding="utf-8"))
    assert set(generated) == set(closure(wanted))
    report = json.loads((tmp_path / "train_custom_loop.tern-report.json").read_text())
    assert report["support_module"] == {"path": FILE_NAME, "definitions": closure(wanted)}
    assert {f["path"]: f["support"] for f in report["files"]}["train.py"] == imported["train.py"]

    # tern on its own output changes nothing, the support module included
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*.py")}
    again = _migrate(str(out), "--in-place")
    assert again.returncode == 0, again.stderr
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*.py")} == before


def test_a_package_that_needs_no_support_gets_none_and_a_stale_one_is_removed(tmp_path):
    out = tmp_path / "control_flow"
    out.mkdir()
    (out / FILE_NAME).write_text(MARKER + "\n", encoding="utf-8")  # left by an earlier run
    proc = _migrate(str(FIXTURES / "control_flow"), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert not (out / FILE_NAME).exists()
    assert not any(_support_imports(p) for p in out.rglob("*.py"))


def test_a_users_file_named_like_the_support_module_is_refused_not_overwritten(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / FILE_NAME).write_text("VALUE = 1\n")
    (pkg / "loss.py").write_text("import tensorflow as tf\n\nLOSS = tf.keras.losses.MeanSquaredError()\n")
    proc = _migrate(str(pkg), "--out", str(tmp_path / "out" / "pkg"))
    assert proc.returncode == 2
    assert f"{FILE_NAME} is the name of the support module tern generates" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (pkg / FILE_NAME).read_text() == "VALUE = 1\n"


def test_a_lone_file_imports_its_support_from_beside_it(tmp_path):
    script = tmp_path / "scripts" / "loss.py"
    script.parent.mkdir()
    script.write_text("import tensorflow as tf\n\nLOSS = tf.keras.losses.MeanSquaredError()\n")
    out = tmp_path / "out" / "loss.py"
    proc = _migrate(str(script), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert _support_imports(out) == ["keras_loss", "keras_mean_squared_error"]
    assert "from _keras_compat import" in out.read_text()
    assert (out.parent / FILE_NAME).is_file()
    run = subprocess.run([sys.executable, "-c", BLOCK_TF + "import loss\nprint(float(loss.LOSS([[1.0]], [[3.0]])))"],
                         cwd=out.parent, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert float(run.stdout) == pytest.approx(4.0)


# -- tern as a user installs it -----------------------------------------------------------


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(dist)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = dist.glob("tern-*.whl")
    return path


def test_the_wheel_ships_the_support_package_and_declares_what_tern_imports(wheel):
    from importlib.metadata import packages_distributions, requires

    with zipfile.ZipFile(wheel) as archive:
        listed = set(archive.namelist())
        (metadata,) = [n for n in listed if n.endswith(".dist-info/METADATA")]
        requires_dist = [line.split(":", 1)[1] for line in archive.read(metadata).decode().splitlines()
                         if line.startswith("Requires-Dist:")]
        declared = {_dist_name(r) for r in requires_dist if "extra ==" not in r}
        optional = {_dist_name(r) for r in requires_dist if "extra ==" in r}
    for name in definitions().values():
        assert f"tern_rules/support/{name.file}.py" in listed
    assert "tern/engine/support_module.py" in listed and "tern_rules/api/losses.toml" in listed
    assert "pytest" in declared  # verification runs the tests with pytest
    pulled = set(declared)
    for dist in declared:
        pulled |= {_dist_name(r) for r in (requires(dist) or ()) if "extra ==" not in r}
    imported, at_top = set(), set()  # at_top: imported when the module loads, not only inside a function
    for path in [*(ROOT / "tern").rglob("*.py"), *(ROOT / "rules").rglob("*.py")]:
        tree = ast.parse(path.read_bytes())
        lazy = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = {node.module.split(".")[0]}
            else:
                continue
            imported |= names
            if id(node) not in lazy:
                at_top |= names
    own = {p.stem for p in [*(ROOT / "tern").rglob("*.py"), *(ROOT / "rules").rglob("*.py")]}  # scripts' sibling imports
    third_party = imported - set(sys.stdlib_module_names) - {"tern", "tern_rules"} - own
    owners = packages_distributions()
    # an optional extra's module (``tern[ray]``) may be imported inside the functions that need it, never on load
    missing = {m: owners.get(m) for m in third_party if not {_dist_name(d) for d in owners.get(m, [])} & pulled
               and (m in at_top or not {_dist_name(d) for d in owners.get(m, [])} & optional)}
    assert not missing, f"tern imports these, and installing the wheel would not bring them: {missing}"


def _dist_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_the_installed_wheel_translates_a_training_package_that_runs_without_tensorflow(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where = subprocess.run([str(python), "-c", "import tern, tern_rules.support; print(tern.__file__); print(tern_rules.support.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, check=True).stdout.split()
    assert all(str(venv) in w for w in where), f"tern came from {where}, not the wheel"
    out = tmp_path / "out" / "train_regularized"
    proc = _migrate(str(FIXTURES / "train_regularized"), "--out", str(out), cwd=tmp_path, tern=[str(venv / "bin" / "tern")])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / FILE_NAME).is_file()
    run = subprocess.run(
        [str(python), "-c", BLOCK_TF + "import pytest\nraise SystemExit(pytest.main(['-q', '-p', 'no:cacheprovider', 'train_regularized']))"],
        cwd=out.parent, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "passed" in run.stdout


def test_the_golden_translations_hold_no_run_of_support_code():
    """A duplicate scan: no six consecutive code lines of a translated user module (goldens)
    stand in the support package, so support is imported, never pasted."""
    def runs(text: str) -> set[tuple[str, ...]]:
        lines = [line.strip() for line in text.splitlines()]
        lines = [line for line in lines if line and not line.startswith(("#", "import ", "from ")) and len(line) > 3]
        return {tuple(lines[i:i + 6]) for i in range(len(lines) - 5)}

    support = set()
    for path in support_module.support_root().glob("*.py"):
        support |= runs(path.read_text(encoding="utf-8"))
    expected = ROOT / "fixtures" / "expected"
    user_files = [p for p in expected.rglob("*.py") if p.name != FILE_NAME]
    assert len(user_files) > 100
    pasted = {p.relative_to(expected).as_posix(): run[0] for p in user_files for run in runs(p.read_text(encoding="utf-8")) & support}
    assert not pasted, pasted
    tf_lines = sum(len(p.read_text().splitlines()) for p in FIXTURES.rglob("*.py"))
    user_lines = sum(len(p.read_text().splitlines()) for p in user_files)
    assert user_lines <= 1.6 * tf_lines, (user_lines, tf_lines)
