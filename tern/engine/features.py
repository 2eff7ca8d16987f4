"""What a feature package adds to the engine, and how the engine finds the features.

The engine knows tables, names and rendering. Training steps, tf.data pipelines and
random draws are *features*: each package under ``tern/features/`` exports ``FEATURE``,
an instance of a ``Feature`` subclass that overrides the hooks it needs and names the
facts type it keeps about a package. A rule that needs package-wide facts of its own
exports a ``FEATURE`` beside its ``RULE`` (one file for a new construct). They are found
by walking ``tern.features`` and the rule folders, so the engine imports none of them
(import-linter checks it: ``pyproject.toml``).

A feature's package facts live in ``PackageInfo.fact(ItsFacts)``; its per-file facts in
``FileContext.file_fact(ItsFileFacts)``. Hooks run in the features' ``order``.
"""

from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from tern.engine.report import AllowedUse
from tern.engine.results import Refusal

if TYPE_CHECKING:
    from tern.engine.context import FileContext, FunctionFrame
    from tern.engine.package import PackageInfo
    from tern.engine.records import Tables


@dataclass(frozen=True)
class KeptTF:
    """TF a translation keeps on purpose, read back from its text: the uses with their lines,
    and the import names whose every use is such a use (their import is kept with a comment)."""

    uses: tuple[AllowedUse, ...]
    bindings: frozenset[str]


class Feature:
    """The hooks a feature may override; each default does nothing."""

    #: the feature's package facts (a dataclass built with no arguments), or None
    facts: type | None = None
    #: hooks of lower order run first (training decides its steps before draws are closed over)
    order: int = 50

    # -- package pre-pass (``tern/engine/package.py``) -----------------------------------
    def scan(self, info: PackageInfo, tree: ast.Module, module: str, is_test: bool, source: str) -> None:
        """Learn from one module of the package (Python's ``ast``)."""

    def close(self, info: PackageInfo) -> None:
        """Decide what needs every module seen; the package's Keras classes are known."""

    def claimed_functions(self, info: PackageInfo) -> set[str]:
        """Package functions this feature translates its own way: never plain helpers."""
        return set()

    # -- one file's translation (``tern/engine/translate.py``) ---------------------------
    def file_facts(self, source: str, info: PackageInfo, tables: Tables) -> object | None:
        """Facts about one file, kept in its context; None when the feature plays no part."""
        return None

    def keeps_function(self, ctx: FileContext, node: cst.FunctionDef) -> bool:
        """Whether this function must stay exactly as written (``check_kept`` then reads it)."""
        return False

    def kept_arguments(self, ctx: FileContext, call: cst.Call) -> list[cst.BaseExpression]:
        """Arguments of this call that must stay exactly as written."""
        return []

    def check_kept(self, ctx: FileContext, node: cst.FunctionDef | cst.Lambda) -> None:
        """Mark what a kept function or lambda holds that cannot stay (TODOs)."""

    def read_kept(self, text: str, info: PackageInfo, tables: Tables) -> KeptTF | None:
        """The TF a translated text keeps on purpose, if this feature keeps any."""
        return None

    def draw_key(self, ctx: FileContext, frame: FunctionFrame) -> cst.BaseExpression | Refusal | None:
        """The PRNG key of a draw in a top-level function, if this feature gives it one."""
        return None


#: where features are found: each module (or package) directly under these exports ``FEATURE`` or not
FEATURE_HOMES = ("tern.features", "tern_rules.structure", "tern_rules.testing")


@functools.cache
def features() -> tuple[Feature, ...]:
    """Every ``FEATURE`` of ``FEATURE_HOMES``, in order."""
    return collect(FEATURE_HOMES)


def collect(homes: tuple[str, ...]) -> tuple[Feature, ...]:
    found = []
    for home in homes:
        package = importlib.import_module(home)
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if info.name.startswith("_"):
                continue
            feature = getattr(importlib.import_module(f"{home}.{info.name}"), "FEATURE", None)
            if isinstance(feature, Feature):
                found.append(feature)
    return tuple(sorted(found, key=lambda f: (f.order, type(f).__name__)))
