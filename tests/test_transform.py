"""``transform``: LibCST's transformer pass, rebuilding only the nodes whose children changed.

Against ``node.visit`` on every fixture source and on hand-written edge cases: the same code
out, the same hooks called in the same order on the same original nodes, and the nodes no
hook changed handed back as they were.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from tern.engine.dispatch import CachedHooks
from tern.engine.transform import transform

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "fixtures" / "tf").rglob("*.py"))


class Recorder(CachedHooks):
    """Renames ``tf`` to ``jnp``, removes ``pass`` and ``del``, splits ``x = y = z`` into two
    statements, drops a call's keyword arguments named ``name``, and logs every hook."""

    def __init__(self):
        self.log: list[tuple[str, type, int]] = []

    def hooks_of(self, kind):
        """Every node type's hooks, logged (LibCST's visit and ``transform`` both call these)."""
        table = self.hook_table()
        if kind not in table:
            enter, leave = super().hooks_of(kind)

            def logged_enter(transformer, node):
                transformer.log.append(("visit", type(node), id(node)))
                return enter is None or enter(transformer, node)

            def logged_leave(transformer, original, updated):
                transformer.log.append(("leave", type(original), id(original)))
                return updated if leave is None else leave(transformer, original, updated)

            table[kind] = (logged_enter, logged_leave)
        return table[kind]

    def leave_Name(self, original, updated):
        return updated.with_changes(value="jnp") if updated.value == "tf" else updated

    def leave_Pass(self, original, updated):
        return cst.RemoveFromParent()

    def leave_Del(self, original, updated):
        return cst.RemoveFromParent()

    def leave_Arg(self, original, updated):
        if updated.keyword is not None and updated.keyword.value == "name":
            return cst.RemoveFromParent()
        return updated

    def leave_SimpleStatementLine(self, original, updated):
        if len(updated.body) == 1 and isinstance(updated.body[0], cst.Assign) and len(updated.body[0].targets) == 2:
            first, second = updated.body[0].targets
            return cst.FlattenSentinel([
                updated.with_changes(body=[cst.Assign([second], updated.body[0].value)]),
                updated.with_changes(body=[cst.Assign([first], second.target)], leading_lines=[]),
            ])
        return updated


EDGES = {
    "removals": "def f():\n    pass\n\nclass C:\n    pass\n    x = 1\n\ndel a; del b\nif x:\n    del y\n",
    "flatten": "a = b = tf.zeros(3)\n\ndef g():\n    c = d = 1\n    return c\n",
    "keywords": "tf.keras.layers.Dense(3, name='d', use_bias=True)(x)\nf(name='only')\n",
    "f-strings": "s = f'{tf.x!r:>{width}} and {tf.y=}'\n",
    "imports": "from tf import a as b, c\nfrom . import tf\nimport tf.keras as k\n",
    "sentinels": "x = lambda tf=tf: tf\nwith tf.a as t, tf.b: pass\nfor i in tf.range(3): pass\nelse: pass\n",
    "decorators": "@tf.function(jit_compile=True)\ndef h(x: tf.Tensor = tf.zeros(1), *, y) -> tf.Tensor:\n    return x\n",
}


def _both(source: str) -> tuple[tuple[str, list], tuple[str, list]]:
    module = cst.parse_module(source)
    theirs, ours = Recorder(), Recorder()
    by_libcst = module.visit(theirs)
    by_tern = transform(module, ours)
    return (by_libcst.code, theirs.log), (by_tern.code, ours.log)


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.relative_to(ROOT / "fixtures" / "tf").as_posix())
def test_fixture_sources_come_out_as_libcst_makes_them(source):
    libcst_run, tern_run = _both(source.read_text())
    assert tern_run == libcst_run


@pytest.mark.parametrize("name", sorted(EDGES))
def test_edge_cases_come_out_as_libcst_makes_them(name):
    (code, log), (tern_code, tern_log) = _both(EDGES[name])
    assert tern_code == code and tern_log == log
    assert code != EDGES[name] or name == "imports"  # the recorder changed something (imports: not a Name read)


def test_unchanged_nodes_are_kept_and_changed_ones_rebuild_only_their_ancestors():
    module = cst.parse_module("a = tf.zeros(3)\nb = other(4)\n")
    assert transform(module, CachedHooks()) is module

    out = transform(module, Recorder())
    assert out is not module and out.code == "a = jnp.zeros(3)\nb = other(4)\n"
    assert out.body[1] is module.body[1]  # the statement nothing changed in
    call = out.body[0].body[0].value
    assert call.args is module.body[0].body[0].value.args  # beside the renamed name: kept
    assert call.func.attr is module.body[0].body[0].value.func.attr


def test_a_module_removed_comes_back_empty_as_libcst_gives_it():
    class RemoveAll(CachedHooks):
        def leave_Module(self, original, updated):
            return cst.RemoveFromParent()

    module = cst.parse_module("# a comment\nx = 1\n")
    out = transform(module, RemoveAll())
    assert out.code == module.visit(RemoveAll()).code and not out.body and not out.header


def test_a_removal_where_the_parent_needs_a_node_fails_as_in_libcst():
    class RemoveNames(CachedHooks):
        def leave_Name(self, original, updated):
            return cst.RemoveFromParent()

    module = cst.parse_module("x.y\n")
    with pytest.raises(TypeError):
        module.visit(RemoveNames())
    with pytest.raises(TypeError, match="RemovalSentinel while visiting a Name"):
        transform(module, RemoveNames())


def test_a_hook_returning_a_non_node_fails_as_in_libcst():
    class Bad(CachedHooks):
        def leave_Integer(self, original, updated):
            return 3

    with pytest.raises(cst.CSTValidationError, match="got a return value of int"):
        transform(cst.parse_module("x = 1\n"), Bad())


def test_only_transformers_that_call_no_field_hooks_are_taken():
    with pytest.raises(TypeError, match="CachedHooks"):
        transform(cst.parse_module("x = 1\n"), cst.CSTTransformer())

    class Overriding(CachedHooks):
        def on_leave(self, original, updated):  # ``transform`` would not call it
            return cst.RemoveFromParent()

    with pytest.raises(TypeError, match="overrides no on_visit or on_leave"):
        transform(cst.parse_module("x = 1\n"), Overriding())
