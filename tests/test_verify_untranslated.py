"""A translated test that stops on a line tern left untranslated is neither a pass nor a
failure (tern/verify/untranslated.py, junit.py, report.py): real pytest runs on a small
package, with near-misses that must stay failures."""

import json
import subprocess
import sys
import textwrap

from tern.verify.report import build_rows

MODULE = '''
def double(x):
    return 2 * x


def broken(x):
    raise TypeError("the package's own bug")
'''

TESTS = '''
import json

from pkg.mod import broken, double


def test_passes():
    assert double(2) == 4


def test_stops_on_a_kept_line_raising_in_a_library():
    assert double(1) == 2
    # TODO(tern): keras.Model.layers: no Flax counterpart
    json.loads("{")


def test_a_kept_assertion_that_runs_and_loses_is_a_failure():
    # TODO(tern): tf.debugging.assert_equal: kept
    assert double(1) == 3


def test_a_kept_line_whose_package_code_raises_is_a_failure():
    # TODO(tern): tf.function: kept
    broken(1)


def test_an_unmarked_line_is_a_failure():
    json.loads("{")


def test_a_comment_not_directly_above_does_not_count():
    # TODO(tern): something: kept

    json.loads("{")


def test_a_multiline_kept_statement():
    # TODO(tern): tf.nest.map_structure: kept
    value = (
        json.loads("{")
    )
'''

KEPT_IMPORT = '''
# TODO(tern): import tensorflow: still used by untranslated code
import tern_no_such_module_anywhere as tf
# TODO(tern): import tensorflow.keras: still used by untranslated code
from tern_no_such_module_anywhere import keras

from pkg.mod import double


def test_not_using_the_kept_import_runs():
    assert double(2) == 4


def test_using_it_on_a_kept_line():
    # TODO(tern): tf.Graph: no rule translates this symbol yet
    with tf.Graph().as_default():
        assert double(2) == 4


def test_calling_it_on_a_kept_line():
    # TODO(tern): keras.layers.Input: a symbolic Keras tensor
    inputs = keras.layers.Input([3])
    assert double(inputs) is not None


def test_passing_it_on_into_the_package():
    # TODO(tern): tf.float32: kept
    dtype = tf.float32
    assert double(dtype) is not None
'''

UNMARKED_IMPORT = '''
import tern_no_such_module_anywhere

from pkg.mod import double


def test_never_collected():
    assert double(2) == 4
'''


def _run(tmp_path, files: dict[str, str]) -> dict:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(MODULE)
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    script = ("import json, sys; from pathlib import Path; from tern.verify.junit import run_pytest; "
              "r = Path(sys.argv[1]); print(json.dumps(run_pytest(sys.argv[3:], r, Path(sys.argv[2]), translated=True)))")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path), str(scratch),
                          *[str(pkg / name) for name in files]], cwd=tmp_path, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_only_a_non_assertion_raised_on_a_todo_marked_test_line_is_untranslated(tmp_path):
    tests = {t.split("::")[-1]: o for t, o in _run(tmp_path, {"mod_test.py": TESTS})["tests"].items()}
    assert tests["test_passes"] == "passed"
    assert tests["test_stops_on_a_kept_line_raising_in_a_library"].startswith("untranslated: JSONDecodeError at mod_test.py:14")
    assert "keras.Model.layers" in tests["test_stops_on_a_kept_line_raising_in_a_library"]
    assert tests["test_a_multiline_kept_statement"].startswith("untranslated: JSONDecodeError")
    for name in ("test_a_kept_assertion_that_runs_and_loses_is_a_failure", "test_a_kept_line_whose_package_code_raises_is_a_failure",
                 "test_an_unmarked_line_is_a_failure", "test_a_comment_not_directly_above_does_not_count"):
        assert tests[name].startswith("failure"), (name, tests[name])


def test_a_kept_import_binds_a_placeholder_that_fails_only_the_tests_using_it(tmp_path):
    result = _run(tmp_path, {"kept_test.py": KEPT_IMPORT, "unmarked_test.py": UNMARKED_IMPORT})
    tests = {t.split("::")[-1]: o for t, o in result["tests"].items()}
    assert tests["test_not_using_the_kept_import_runs"] == "passed"
    assert tests["test_using_it_on_a_kept_line"] == ("untranslated: tern_no_such_module_anywhere.Graph: not importable where "
                                                     "the translation runs (an import tern left untranslated) (at kept_test.py:16)")
    assert tests["test_calling_it_on_a_kept_line"].endswith("(at kept_test.py:22)")
    # bound on a kept line and passed on: whatever fails on it, the value came from the kept import
    assert tests["test_passing_it_on_into_the_package"].endswith("(at kept_test.py:29)")
    unmarked = [o for t, o in result["tests"].items() if "unmarked_test" in t]
    assert unmarked == ["error: collection failure"]  # an import nobody marked: the file is in error


def test_an_untranslated_test_is_listed_not_counted_and_does_not_make_the_module_fail():
    replay = ({"import_error": "", "cases": [{"target": "pkg.mod:Model", "id": "0", "status": "match", "ran": [],
                                              "outputs": [{"name": "y", "ok": True, "max_abs": 0.0, "max_rel": 0.0}],
                                              "gradients": []}]}, None, False)
    tests = {"mod_test.py": ({"tests": {"mod_test.py::a": "untranslated: NameError at mod_test.py:3, ...",
                                            "mod_test.py::b": "passed"}, "exit": 1}, None, False)}
    row = {r.module: r for r in build_rows("pkg", ["pkg.mod"], {"pkg.mod": replay}, tests, {}, None, None, {})}["pkg.mod"]
    assert (row.status, row.tests_passed, row.tests_total) == ("equivalent", 1, 1)
    assert row.not_run == ["mod_test.py::a: NameError at mod_test.py:3, ..."] and not row.problems
    failing = {"mod_test.py": ({"tests": {"mod_test.py::a": "failure: NameError"}, "exit": 1}, None, False)}
    row = {r.module: r for r in build_rows("pkg", ["pkg.mod"], {"pkg.mod": replay}, failing, {}, None, None, {})}["pkg.mod"]
    assert row.status == "mismatch"  # the same end on a line tern translated is a failure
