"""The defaults of every top-level function of the package (and of its top-level classes'
methods), compared from the two sources.

A replay compares the defaults of what the tests call (``interface.py``). A function the
tests never call, or call only with a model they pass in (``fit(model, data,
learning_rate=0.1)``: not recorded), is compared by nothing else, and a changed default there
agrees with every test. So both sources are read with ``ast``: a parameter of one name in the
TF function and in its translation, with a literal default on both sides (numbers, strings,
booleans, None, tuples of them), must have one value, as ``interface.same_default`` judges;
so must a method of one name in a class of one name (a learning-rate schedule's
``__init__``: a Keras layer becomes a Flax module, whose fields no ``__init__`` declares, so
its defaults are the replay's to compare). Anything else (a name or a call as default, a parameter only one side has) is not compared.
Functions a replay compared already are left to it: one finding per difference.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable

from tern.engine.parsed_files import parsed_file
from tern.verify.interface import SKIPPED, same_default


def _literal_defaults(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, object]:
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    pairs += [(arg, default) for arg, default in zip(args.kwonlyargs, args.kw_defaults) if default is not None]
    found = {}
    for arg, default in pairs:
        if arg.arg in SKIPPED:
            continue
        try:
            found[arg.arg] = ast.literal_eval(default)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue  # not a literal: not compared
    return found


def _functions(path: Path) -> dict[str, dict[str, object]]:
    """Top-level function name (``Class.method`` for a top-level class's methods) -> its
    literal defaults; {} for a file that cannot be read."""
    try:
        tree = parsed_file(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return {}
    found = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = _literal_defaults(node)
        elif isinstance(node, ast.ClassDef):  # a schedule's or a loss's constructor, kept by the translation
            found.update((f"{node.name}.{method.name}", _literal_defaults(method)) for method in node.body
                         if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return found


def _source(root: Path, module: str) -> Path:
    """The file of ``module`` (dotted, from the package's name) under the package directory ``root``."""
    parts = module.split(".")[1:]
    if not parts or (root.joinpath(*parts)).is_dir():
        return root.joinpath(*parts, "__init__.py")
    return root.joinpath(*parts).with_suffix(".py")


def compared_by_replay(cases: Iterable[dict]) -> set[str]:
    """The ``module:function`` targets whose replayed cases compared their defaults already
    (``interface`` checks). A training configuration's case calls the function but compares
    its result, not its signature (and a stand-in model may stop it), so its defaults are
    still compared here."""
    return {case["target"] for case in cases if "interface" in case}


def static_default_checks(original: Path, translated: Path, modules: list[str],
                          replayed: set[str] = frozenset()) -> dict[str, list[dict]]:
    """Per module, one check per default both sides write as a literal (``interface`` checks'
    shape: name, ok, problem); ``replayed``: ``module:function`` targets a replay compared."""
    checks: dict[str, list[dict]] = {}
    for module in modules:
        theirs = _functions(_source(translated, module))
        for function, keras in _functions(_source(original, module)).items():
            if function not in theirs or f"{module}:{function.partition('.')[0]}" in replayed:
                continue
            for name, value in keras.items():
                if name not in theirs[function]:
                    continue
                same = same_default(name, value, theirs[function][name])
                if same is None:
                    continue
                check = {"name": f"default of {name} ({function})", "ok": same}
                if not same:
                    check["problem"] = f"{theirs[function][name]!r} in the translation, TF has {value!r}"
                checks.setdefault(module, []).append(check)
    return checks
