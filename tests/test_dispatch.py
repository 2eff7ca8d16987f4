"""``tern.engine.dispatch.CachedHooks`` calls the hooks LibCST's ``CSTTransformer`` calls, in the
same order, with the same results; and refuses a per-field hook it would not call."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from tern.engine.dispatch import CachedHooks

ROOT = Path(__file__).resolve().parents[1]


def _transformer(base: type) -> type:
    class Renames(base):
        """Renames names, skips the bodies of two-parameter functions, drops ``pass``."""

        def __init__(self):
            super().__init__()
            self.events: list[tuple[str, str]] = []

        def visit_FunctionDef(self, node) -> bool:
            self.events.append(("def", node.name.value))
            return len(node.params.params) != 2

        def leave_FunctionDef(self, original, updated):
            self.events.append(("/def", original.name.value))
            return updated

        def visit_Call(self, node) -> None:
            self.events.append(("call", type(node.func).__name__))

        def leave_Name(self, original, updated):
            return updated.with_changes(value=updated.value + "_")

        def leave_Pass(self, original, updated):
            return cst.RemovalSentinel.REMOVE

    return Renames


@pytest.mark.parametrize("path", sorted((ROOT / "fixtures" / "tf").rglob("*.py"))[::6], ids=lambda p: p.parent.name + "/" + p.name)
def test_same_tree_and_calls_as_libcst(path):
    module = cst.parse_module(path.read_text(encoding="utf-8"))
    ours, theirs = _transformer(CachedHooks)(), _transformer(cst.CSTTransformer)()
    assert module.visit(ours).code == module.visit(theirs).code
    assert ours.events == theirs.events


def test_a_field_hook_is_refused():
    with pytest.raises(TypeError, match="visit_Call_func"):
        class Funcs(CachedHooks):
            def visit_Call_func(self, node) -> None:
                pass


def test_a_transformer_goes_with_its_last_reference_not_with_the_cyclic_collector():
    """The hook table holds functions: a bound method kept on its own instance would be a cycle,
    and the transformer, with the trees it holds, would wait for a collection."""
    import gc
    import weakref

    transformer = _transformer(CachedHooks)()
    transformer.visit_Name = lambda node: None  # a hook set on the instance is found, and called, too
    cst.parse_module("def f(a):\n    return a\n").visit(transformer)
    gone = weakref.ref(transformer)
    gc.disable()
    try:
        del transformer
        assert gone() is None
    finally:
        gc.enable()


def test_instances_of_a_class_share_its_hooks_and_one_with_its_own_hook_keeps_them_apart():
    """A file makes new transformers: their class' hooks are found once, not per instance. A hook
    set on one instance is that instance's alone, before or after others of its class ran."""
    cls = _transformer(CachedHooks)
    source = "def f(a):\n    return g(a)\n"
    first, second, own = cls(), cls(), cls()
    seen: list[str] = []
    own.visit_Name = lambda node: seen.append(node.value)
    assert cst.parse_module(source).visit(first).code == "def f_(a_):\n    return g_(a_)\n"
    assert cst.parse_module(source).visit(own).code == "def f_(a_):\n    return g_(a_)\n"
    assert cst.parse_module(source).visit(second).code == "def f_(a_):\n    return g_(a_)\n"
    assert seen == ["f", "a", "g", "a"]  # own's hook ran, on its visit only
    assert first._hook_table is second._hook_table is not own._hook_table
    assert first.events == second.events == own.events == [("def", "f"), ("call", "Name"), ("/def", "f")]
