"""What is taken from an LLM answer: one definition and the imports it needs, or a
rejection with the reason (which becomes the next prompt's evidence).

The answer is untrusted text. Only a fenced code block is read; inside it, only import
statements and the one definition of the unit are allowed (no module-level code), the
definition keeps the unit's name and kind, and nothing in it may import or name
TensorFlow or Keras, import modules outside a short allowlist (no ``os``, ``subprocess``,
``socket``...), or leave a ``TODO(tern)``. What the answer says besides the code is
ignored, so instructions smuggled into the migrated source can at most change the unit's
code, which then has to pass the sandbox like any other answer.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from tern.agent.units import Unit
from tern.engine.report import TODO_MARK

#: top-level modules a translated unit may import (besides the package itself)
ALLOWED_IMPORTS = frozenset({
    "__future__", "jax", "jaxlib", "flax", "optax", "orbax", "numpy", "math", "functools", "itertools", "operator",
    "typing", "dataclasses", "collections", "enum", "abc", "string", "re", "numbers", "warnings", "einops", "chex",
})
FORBIDDEN_NAMES = frozenset({"tf", "tensorflow", "keras", "tf_keras"})
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Answer:
    code: str  # the definition alone
    imports: tuple[str, ...]  # import statements, one per line, as written


@dataclass(frozen=True)
class Rejected:
    reason: str


def code_blocks(text: str) -> list[str]:
    return [body for lang, body in _FENCE.findall(text) if lang.lower() in ("", "python", "py", "python3")]


def has_code_block(text: str) -> bool:
    return bool(code_blocks(text))


#: a run of this many lines seen this many times before: the model is looping
LOOP_LINES, LOOP_REPEATS, LOOP_MIN_CHARS = 3, 2, 40
_OPEN_FENCE = re.compile(r"```[ \t]*(python3?|py)?[ \t]*\n", re.IGNORECASE)


def stop_reading(text: str, package: str) -> str:
    """Why an answer being streamed can be closed now, or "" to read on.

    ``block``: its Python block is complete (the prompt asks for exactly one: the rest
    would be prose, or a model that does not stop). ``doomed``: that block already imports
    what no answer may, so ``extract`` will reject it whatever follows. ``looping``: the
    last lines repeat, a small model's way of never ending. The answer is read no further
    than its first Python block either way, so only that block is judged."""
    if has_code_block(text):
        return "block"
    if doomed(text, package):
        return "doomed"
    return "looping" if _loops(text) else ""


def doomed(text: str, package: str) -> str:
    """The rejection the open Python block already earned by its imports, or ""."""
    opening = _OPEN_FENCE.search(_FENCE.sub("", text))  # past the complete blocks (none of them Python)
    if opening is None:
        return ""
    lines = _FENCE.sub("", text)[opening.end():].split("\n")[:-1]  # complete lines only
    imports = []
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(("import ", "from ")):
            break
        imports.append(line)
    try:
        tree = ast.parse("\n".join(imports))
    except SyntaxError:
        return ""
    return _forbidden(tree, package)


def cut_reason(text: str, stop: str, package: str) -> str:
    """What to tell the model about an answer that was closed before its block ended."""
    if stop == "doomed":
        return doomed(text, package)
    if stop == "looping":
        return "the answer repeated the same lines over and over without closing its ```python block"
    return ""


def _loops(text: str) -> bool:
    lines = [line.strip() for line in text.split("\n")[:-1] if line.strip()]
    tail = lines[-LOOP_LINES:]
    if len(lines) < LOOP_LINES * (LOOP_REPEATS + 1) or sum(map(len, tail)) < LOOP_MIN_CHARS:
        return False
    seen = sum(lines[i:i + LOOP_LINES] == tail for i in range(len(lines) - LOOP_LINES))
    return seen >= LOOP_REPEATS


def extract(text: str, unit: Unit, package: str) -> Answer | Rejected:
    blocks = code_blocks(text)
    if not blocks:
        return Rejected("the answer has no ```python code block")
    wanted = unit.name.rsplit(".", 1)[-1]
    reasons = []
    for block in blocks:
        found = _one(block, unit, wanted, package)
        if isinstance(found, Answer):
            return found
        reasons.append(found.reason)
    return Rejected(reasons[0] if len(reasons) == 1 else "; ".join(dict.fromkeys(reasons)))


def _one(block: str, unit: Unit, wanted: str, package: str) -> Answer | Rejected:
    try:
        tree = ast.parse(block)
    except SyntaxError as exc:
        return Rejected(f"the code does not parse: {exc.msg} (line {exc.lineno} of the block)")
    lines = block.splitlines()
    imports, definition, extra = [], None, []
    want_class = unit.kind == "class"
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append("\n".join(lines[node.lineno - 1: node.end_lineno]))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == wanted:
            if isinstance(node, ast.ClassDef) != want_class:
                return Rejected(f"`{wanted}` must stay a {'class' if want_class else 'function'}")
            if definition is not None:
                return Rejected(f"`{wanted}` is defined twice")
            definition = node
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue  # a stray string is harmless and dropped
        else:
            extra.append(getattr(node, "name", type(node).__name__))
    if definition is None:
        also = f"; it defines {', '.join(f'`{n}`' for n in extra)}" if extra else ""
        return Rejected(f"the code block does not define `{wanted}` (keep the unit's name){also}")
    if extra:
        return Rejected(f"only imports and the definition of `{wanted}` may be given, not `{extra[0]}` at module level")
    problem = _forbidden(tree, package)
    if problem:
        return Rejected(problem)
    start = min([definition.lineno, *(d.lineno for d in definition.decorator_list)])
    code = "\n".join(lines[start - 1: definition.end_lineno])
    if TODO_MARK in code:
        return Rejected(f"the code still has a {TODO_MARK}: translate it completely")
    return Answer(code=_dedent(code), imports=tuple(imports))


def _forbidden(tree: ast.AST, package: str) -> str:
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [("." if node.level else "") + (node.module or "")]
        for module in modules:
            top = module.split(".")[0]
            if top in FORBIDDEN_NAMES:
                return f"the code imports {module}: the translation must not use TensorFlow or Keras"
            if module.startswith(".") or top == package:
                continue
            if top not in ALLOWED_IMPORTS:
                return f"the code imports {module}, which a translated unit may not (allowed: {', '.join(sorted(ALLOWED_IMPORTS - {'__future__'}))})"
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            return f"the code uses `{node.id}`: the translation must not use TensorFlow or Keras"
        if isinstance(node, ast.Name) and node.id in ("__import__", "eval", "exec", "compile"):
            return f"the code calls `{node.id}`, which a translated unit may not"
        if isinstance(node, ast.Attribute) and node.attr == "import_module":
            return "the code imports modules dynamically (importlib.import_module)"
    return ""


def _dedent(code: str) -> str:
    lines = code.splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines)
