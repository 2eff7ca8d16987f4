"""The tf.data feature's hooks: package and file facts, graph functions kept, kept TF read back."""

from __future__ import annotations

import ast

import libcst as cst

from tern.engine.features import Feature, KeptTF
from tern.engine.names import parsed
from tern.features.tf_data import graph_functions, kept
from tern.features.tf_data.datasets import FileDatasets, PackageDatasets, file_datasets, scan_module


class TfData(Feature):
    facts = PackageDatasets
    order = 30

    def scan(self, info, tree: ast.Module, module: str, is_test: bool, source: str) -> None:
        scan_module(tree, info.fact(PackageDatasets), source=source)

    def file_facts(self, source: str, info, tables) -> FileDatasets | None:
        """The file's tf.data facts, when its package uses tf.data at all (else no cost)."""
        package = info.fact(PackageDatasets)
        if not package.used:
            return None
        try:
            return file_datasets(parsed(source), package, tables)
        except (SyntaxError, ValueError):
            return None

    def keeps_function(self, ctx, node: cst.FunctionDef) -> bool:
        return graph_functions.is_graph_function(ctx, node)

    def kept_arguments(self, ctx, call: cst.Call) -> list[cst.BaseExpression]:
        return graph_functions.graph_arguments(ctx, call)

    def check_kept(self, ctx, node) -> None:
        graph_functions.check(ctx, node)

    def read_kept(self, text: str, info, tables) -> KeptTF | None:
        reading = kept.read(text, info.fact(PackageDatasets), tables)
        return None if reading is None else KeptTF(reading.allowed, reading.allowed_bindings)


FEATURE = TfData()
