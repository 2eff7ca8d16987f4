"""Programmatic rules: the contract, and their discovery under ``rules/``.

A rule overrides the hooks it needs; each hook returns a replacement or ``None`` for
"not mine". Hooks see the original node (for analysis) and the updated one (children
already translated). Rules are found by walking ``rules/structure`` and ``rules/testing``;
a module exposes its rule as ``RULE``. Nothing is registered by hand.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

import libcst as cst


class Rule:
    id: str = ""
    #: canonical source names this rule rewrites structurally (no "no rule" residue for them)
    consumes: frozenset[str] = frozenset()
    #: "all", "tests" (test files only) or "models" (non-test files only)
    scope: str = "all"

    def applies(self, is_test: bool) -> bool:
        return self.scope == "all" or (self.scope == "tests") == is_test

    def visit_class(self, ctx, node: cst.ClassDef) -> None: ...
    def visit_function(self, ctx, node: cst.FunctionDef) -> None: ...

    def prepare_call(self, ctx, original: cst.Call, updated: cst.Call) -> cst.Call | None:
        """Arguments Keras passes implicitly, made explicit before the layer call is mapped (every rule runs)."""
        return None

    def leave_call(self, ctx, original: cst.Call, updated: cst.Call) -> cst.BaseExpression | None:
        return None

    def leave_attribute(self, ctx, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression | None:
        return None

    def leave_statement(self, ctx, original, updated):
        return None

    def leave_function(self, ctx, original: cst.FunctionDef, updated: cst.FunctionDef):
        return None

    def leave_class(self, ctx, original: cst.ClassDef, updated: cst.ClassDef):
        return None

    def leave_module(self, ctx, updated: cst.Module) -> cst.Module | None:
        return None


HOOKS = ("visit_class", "visit_function", "prepare_call", "leave_call", "leave_attribute", "leave_statement",
         "leave_function", "leave_class", "leave_module")


def overrides(rule: Rule, hook: str) -> bool:
    """Whether ``rule`` has a hook of its own (``Rule``'s return None): the engine calls only those."""
    return hook in vars(rule) or getattr(type(rule), hook) is not getattr(Rule, hook)


@functools.cache
def discover() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    for family in ("structure", "testing"):
        package = importlib.import_module(f"tern_rules.{family}")
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if info.name.startswith("_"):
                continue
            module = importlib.import_module(f"tern_rules.{family}.{info.name}")
            rule = getattr(module, "RULE", None)
            if isinstance(rule, Rule):
                rules.append(rule)
    return tuple(sorted(rules, key=lambda r: getattr(r, "order", 50)))


@functools.cache
def consumed_names() -> frozenset[str]:
    out: set[str] = set()
    for rule in discover():
        out |= rule.consumes
    return frozenset(out)
