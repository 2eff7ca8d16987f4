"""Regenerate docs/coverage.md from the rule tables: python tests/regen_coverage.py

The coverage page answers "does tern translate X, and into what?" from the very records the
engine applies (``tern.engine.records.tables()``) and from the programmatic rules it discovers, so
it cannot drift from them unnoticed: ``tests/test_docs.py`` fails when the page is stale.
Review ``git diff docs/coverage.md`` like a golden file: each changed row is a changed claim.
Output is sorted and carries no timestamp, so a rerun on the same rules changes nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "coverage.md"

#: longest code shown in a cell before inner argument lists are folded to ``(...)``
CODE_LIMIT = 72
#: longest prose shown in a cell (cut at a word, marked with "...")
PROSE_LIMIT = 140

_SPAN = re.compile(r"\[\[.*?\]\]", re.S)  # optional template spans (tern/engine/render.py)
_SUPPORT = re.compile(r"\{support:(\w+)\}")

VALUE_KINDS = {  # kind -> heading; the compile() strings come from rules/values/compile.toml
    "activation": "activations",
    "initializer": "initializers",
    "regularizer": "regularizers",
    "optimizer": "`compile()` optimizer strings",
    "loss": "`compile()` loss strings",
    "metric": "`compile()` metric strings",
}


def _tf(name: str) -> str:
    """A canonical name as users write it: ``tensorflow.math.abs`` reads ``tf.math.abs``."""
    return "tf" + name[len("tensorflow"):] if name == "tensorflow" or name.startswith("tensorflow.") else name


def _cell(text: str) -> str:
    return text.replace("\n", " ").replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{_cell(text)}`"


def _aliaser(modules):
    """Target names spelled as translations spell them (``jax.numpy.sum`` reads ``jnp.sum``)."""
    modules = sorted(modules, key=lambda m: -len(m.name))
    pattern = re.compile(r"(?<![\w.])(" + "|".join(re.escape(m.name) for m in modules) + r")\.(?=\w)")
    aliases = {m.name: m.alias for m in modules}
    return lambda text: pattern.sub(lambda match: aliases[match.group(1)] + ".", text)


def _groups(text: str) -> list[tuple[int, int, int]]:
    """(depth, start, end) of every parenthesized group, ``end`` past its ``)``."""
    out, stack = [], []
    for i, char in enumerate(text):
        if char == "(":
            stack.append(i)
        elif char == ")" and stack:
            start = stack.pop()
            out.append((len(stack), start, i + 1))
    return out


def _fold(text: str, limit: int) -> str:
    """Fold argument lists to ``(...)``, outermost nested ones first, until ``text`` fits.

    The top-level call keeps its arguments unless the text is still twice too long:
    ``KerasOptimizer(optax.adam(...), learning_rate={learning_rate})`` says more than
    ``KerasOptimizer(...)``, and ``jnp.pad({inputs}, (...))`` more than a row of ``(...)``.
    """
    while len(text) > limit:
        groups = [g for g in _groups(text) if text[g[1] + 1:g[2] - 1] not in ("", "...")]
        groups = [g for g in groups if g[0] > 0] or (groups if len(text) > 2 * limit else [])
        if not groups:
            break
        _, start, end = min(groups, key=lambda g: (g[0], g[1] - g[2], g[1]))
        text = text[:start] + "(...)" + text[end:]
    return text


def _expression(template: str | list[str], alias) -> str:
    """A target or template as a reader scans it: aliases, optional spans dropped, long
    argument lists folded; a list of alternatives shows its first, plain form."""
    # the first unguarded form ({when = ..., template = ...} forms are special cases)
    first = next((t for t in template if isinstance(t, str)), None) if isinstance(template, list) else template
    text = _fold(alias(_SUPPORT.sub(r"\1", _SPAN.sub("", first))), CODE_LIMIT)
    others = len(template) - 1 if isinstance(template, list) else 0
    return _code(text) + (f" (+{others} form{'s' if others > 1 else ''})" if others else "")


def _prose(text: str, limit: int = PROSE_LIMIT) -> str:
    """The first sentence of ``text``, cut at a word when longer than ``limit``."""
    text = " ".join(text.split())
    ends = (m.start() for m in re.finditer(r"(?<!e\.g\.)(?<!i\.e\.)(?<=[.;])\s", text)
            if text[:m.start()].count("(") == text[:m.start()].count(")"))
    sentence = text[:next(ends, len(text))].rstrip(";")
    if len(sentence) > limit:
        sentence = sentence[:limit].rsplit(" ", 1)[0].rstrip(",;:(") + " ..."
    return _cell(sentence)


def _leading_comment(path: Path) -> str:
    """First sentence of a table file's leading comment block: what the file is for."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#") or not line.strip("# "):
            break
        lines.append(line.lstrip("#").strip())
    return _prose(" ".join(lines), 400) if lines else ""


def _notes(defaults: dict[str, str], unsupported: dict[str, str], note: str, alias) -> str:
    parts = []
    if defaults:
        parts.append("defaults: " + ", ".join(_code(f"{k}={_fold(alias(v), 40)}") for k, v in sorted(defaults.items())))
    if unsupported:
        parts.append("TODO if passed: " + ", ".join(_code(k) for k in sorted(unsupported)))
    if note:
        parts.append(_prose(note))
    return "; ".join(parts)


def _symbol(source: str, aliases: tuple[str, ...]) -> str:
    also = f" (also {', '.join(_code(_tf(a)) for a in sorted(aliases))})" if aliases else ""
    return _code(_tf(source)) + also


def _by_file(records) -> dict[str, list]:
    """Records grouped by their table file (``api/math.toml``), each record once."""
    files: dict[str, list] = {}
    for record in {record.origin: record for record in records}.values():
        files.setdefault(record.origin.split("#")[0], []).append(record)
    return {name: sorted(files[name], key=lambda r: r.source) for name in sorted(files)}


def _api_row(r, alias) -> tuple[str, str]:
    """(translated to, notes) of an ``[[api]]``-shaped record."""
    if r.todo:
        return "left with TODO: " + _prose(r.todo), _prose(r.note) if r.note else ""
    if getattr(r, "constant", None) is not None:
        return f"`{r.constant}`", _prose(r.note) if r.note else ""
    target = _expression(r.template if r.template is not None else r.target, alias)
    return target, _notes(r.signature.defaults, r.signature.unsupported, r.note, alias)


def _api_section(api: dict[str, list], root: Path, alias) -> list[str]:
    out = ["## TF and Keras symbols (`rules/api/`)", "",
           "One `[[api]]` record per symbol. *Translated to* is the target, or the template's first form "
           "with optional arguments left out; *defaults* are written out because the two sides differ.", ""]
    for name, records in api.items():
        out += [f"### `rules/{name}` ({len(records)})", "", _leading_comment(root / name), "",
                "| TF/Keras symbol | translated to | notes |", "| --- | --- | --- |"]
        for r in records:
            target, notes = _api_row(r, alias)
            out.append(f"| {_symbol(r.source, r.aliases)} | {target} | {notes} |")
        out.append("")
    return out


def _layer_target(r, alias) -> str:
    if r.target:
        return _code(alias(r.target))
    return _expression(r.template if r.template is not None else r.apply, alias)


def _layer_section(layers: dict[str, list], root: Path, alias) -> list[str]:
    out = ["## Keras layers (`rules/layers/`)", "",
           "One `[[layer]]` record per layer. *Weights ported* lists the Keras variables the record's "
           "weight map carries into the Flax tree (`tern weights`, the verifier's replay); *no* means the "
           "record has no weight map.", ""]
    for name, records in layers.items():
        out += [f"### `rules/{name}` ({len(records)})", "", _leading_comment(root / name), "",
                "| Keras layer | Flax target | weights ported | notes |", "| --- | --- | --- | --- |"]
        for r in records:
            ported = "yes: " + ", ".join(_code(w.keras) for w in r.weights) if r.weights else "no"
            notes = _notes(r.signature.defaults, r.signature.unsupported, r.note, alias)
            out.append(f"| {_symbol(r.source, r.aliases)} | {_layer_target(r, alias)} | {ported} | {notes} |")
        out.append("")
    return out


def _kinds(values) -> list[str]:
    """Value kinds in reading order: the known ones as listed above, then any new ones."""
    order = list(VALUE_KINDS)
    return sorted({r.kind for r in values}, key=lambda k: (order.index(k) if k in order else len(order), k))


def _value_section(values, alias) -> list[str]:
    out = ["## Values (`rules/values/`)", "",
           "Activations, initializers and regularizers named by string or symbol, and the strings "
           "`compile()` accepts (`rules/values/compile.toml`, generated by `python tests/compile_strings.py`).", ""]
    for kind in _kinds(values):
        rows = sorted((r for r in values if r.kind == kind), key=lambda r: r.source)
        out += [f"### {VALUE_KINDS.get(kind, kind)} ({len(rows)})", "",
                "| value | translated to | notes |", "| --- | --- | --- |"]
        for r in rows:
            source = _code(_tf(r.source)) if "." in r.source else _code(repr(r.source))
            out.append(f"| {source} | {_expression(r.target, alias)} | {_prose(r.note) if r.note else ''} |")
        out.append("")
    return out


def _allowed_section(allowed, alias) -> list[str]:
    out = ["## TensorFlow kept on purpose (`rules/allowed/`)", "",
           "Not residue: no TODO, listed in the migrate report as allowed TF use.", ""]
    for r in sorted(allowed, key=lambda r: r.name):
        out += [f"### {r.name} (`rules/{r.origin.split('#')[0]}`)", "",
                f"* Kept as written: every name under {_code(_tf(r.prefix))}: {_cell(r.why)}.",
                f"* Datasets are made by: {', '.join(_code(_tf(c)) for c in r.constructors)}.",
                f"* Methods that keep a chain a dataset: {', '.join(_code(m) for m in sorted(r.methods))}.",
                "* Methods whose functions stay TF (tf.data runs them in its graph): "
                f"{', '.join(_code(m) for m in sorted(r.graph_methods))}."]
        if r.bridge:
            out.append(f"* A `for` loop over a dataset iterates {_expression(r.bridge, alias)}.")
        out += [f"* Inside a function compiled with `jax.jit`: left with TODO: {_cell(r.jit_reason)}.", ""]
    return out


def _assertion_section(alias) -> list[str]:
    from tern_rules.testing.assertions import methods

    records = sorted(methods().values(), key=lambda r: r.source)
    out = ["## Test assertions (`rules/testing/assertions.toml`)", "",
           "`tf.test.TestCase` helpers called on `self`, read by the `testing:assertions` rule.", "",
           "| assertion | translated to | notes |", "| --- | --- | --- |"]
    for r in records:
        target, notes = _api_row(r, alias)
        out.append(f"| `self.{r.source}` | {target} | {notes} |")
    return out + [""]


def _tensor_member_section(alias) -> list[str]:
    from tern_rules.structure.tensor_methods import members

    records = sorted(members().values(), key=lambda r: (r.on[0], r.name))
    out = ["## Members of TF values (`rules/structure/tensor_methods.toml`)", "",
           "Methods and attributes only TF tensors, shapes, dtypes, variables, ragged and sparse tensors have, "
           "read by the `structure:tensor-methods` rule in files that import TensorFlow or Keras. *Taken as TF's "
           "on* says which receivers make a use TF's: any, or only a visible shape (`x.shape`, `x.get_shape()`) "
           "or dtype (`x.dtype`).", "",
           "| member | of | taken as TF's on | translated to | notes |", "| --- | --- | --- | --- | --- |"]
    for r in records:
        use = f"x.{r.name}()" if r.kind == "method" else f"x.{r.name}"
        if r.template is None:
            target = "left with TODO: " + _prose(r.todo)
        else:
            target = _expression(r.template.replace("{receiver}", "x"), alias)
            if r.todo:
                target += f" on a visible {r.template_receiver}; elsewhere left with TODO"
        of = ", ".join(f"`tf.{c}`" for c in r.on)
        out.append(f"| {_code(use)} | {of} | {r.receiver} | {target} | {_prose(r.note) if r.note else ''} |")
    return out + [""]


def _rule_id(tree: ast.Module, family: str, stem: str) -> str:
    """The ``id`` the rule's class declares (what reports show), else ``family:stem``; empty
    for a module with no top-level ``RULE``: a helper other rules call (``discover`` skips it)."""
    if not any(isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "RULE" for t in node.targets)
               for node in tree.body):
        return ""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "id" for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
    return f"{family}:{stem}"


def programmatic_rules(root: Path) -> list[tuple[str, str, str]]:
    """(rule id, file, summary) per module under rules/structure and rules/testing, walked
    as ``tern.engine.rule.discover`` walks them (``_``-prefixed modules skipped)."""
    rows = []
    for family in ("structure", "testing"):
        for path in sorted((root / family).glob("*.py")):
            if path.stem.startswith("_"):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            doc = (ast.get_docstring(tree) or "").split("\n\n")[0]
            summary = _cell(" ".join(doc.split()).replace("``", "`"))
            rows.append((_rule_id(tree, family, path.stem), f"rules/{family}/{path.name}", summary))
    return rows


def _rules_section(root: Path) -> list[str]:
    out = ["## Programmatic rules (`rules/structure/`, `rules/testing/`)", "",
           "Classes, models and training code are rewritten by rules written as code, not tables: "
           "Keras classes, functional and Sequential models, `tf.function`, `GradientTape` steps, "
           "`compile`/`fit`, checkpoints, schedules, frozen layers, tf.data loops, and the unit tests. "
           "Each rule's first docstring paragraph follows; [training.md](training.md) describes the "
           "training rules' behaviour in full.", "",
           "| rule | file | what it does |", "| --- | --- | --- |"]
    for rule_id, path, summary in programmatic_rules(root):
        out.append(f"| {_code(rule_id) if rule_id else 'helper of other rules'} | `{path}` | {summary} |")
    return out + [""]


def coverage_markdown() -> str:
    """docs/coverage.md as the rule tables and rule modules make it today."""
    from tern.engine.records import rules_root, tables
    from tern_rules.structure.tensor_methods import members
    from tern_rules.testing.assertions import methods

    root = rules_root()
    t = tables()
    alias = _aliaser(t.modules)
    api = _by_file(t.api.values())
    layers = _by_file(t.layers.values())
    values = list(t.values.values())
    todo = sum(1 for records in api.values() for r in records if r.todo)
    rules = programmatic_rules(root)
    head = [
        "# Coverage: what the rules translate, and into what",
        "",
        "Every TF/Keras symbol, layer and value the rule tables know, with its JAX/Flax form, and the "
        "programmatic rules. Back to the [README](../README.md); how to add to it: [rules.md](rules.md).",
        "",
        "<!-- Generated by `python tests/regen_coverage.py` from rules/: do not edit by hand "
        "(tests/test_docs.py fails when it is stale). -->",
        "",
        "| family | records |",
        "| --- | --- |",
        f"| TF/Keras API (`rules/api/`, {len(api)} files) | {sum(map(len, api.values()))} ({todo} left with a TODO on purpose) |",
        f"| Keras layers (`rules/layers/`, {len(layers)} files) | {sum(map(len, layers.values()))} "
        f"({sum(1 for rs in layers.values() for r in rs if r.weights)} with a weight map) |",
        *(f"| values (`rules/values/`): {VALUE_KINDS.get(k, k)} | {sum(1 for r in values if r.kind == k)} |" for k in _kinds(values)),
        f"| TF kept on purpose (`rules/allowed/`) | {len(t.allowed)} |",
        f"| test assertions (`rules/testing/assertions.toml`) | {len(methods())} |",
        f"| members of TF values (`rules/structure/tensor_methods.toml`) | {len(members())} "
        f"({sum(1 for r in members().values() if r.template is None)} left with a TODO) |",
        *(f"| programmatic rules: `rules/{family}/` | {sum(1 for r in rules if r[0].startswith(family + ':'))} |"
          for family in ("structure", "testing")),
        "",
        "TF or Keras that neither a table below nor a programmatic rule handles is left as written "
        "with a `# TODO(tern)` and a reason. Training code "
        "(custom steps, `fit`, checkpoints, schedules, frozen layers) is described in "
        "[training.md](training.md).",
        "",
    ]
    body = (_api_section(api, root, alias) + _layer_section(layers, root, alias) + _value_section(values, alias)
            + _allowed_section(t.allowed, alias) + _assertion_section(alias) + _tensor_member_section(alias)
            + _rules_section(root))
    return "\n".join(head + body).rstrip("\n") + "\n"


if __name__ == "__main__":
    PAGE.parent.mkdir(exist_ok=True)
    PAGE.write_text(coverage_markdown(), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
