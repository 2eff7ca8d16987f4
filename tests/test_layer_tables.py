"""Fast consistency checks of the layer and value tables (rules/layers, rules/values).

Against the installed packages: every Keras source param and call param exists in the
live Keras signature (in order, so positional arguments bind right); every target name
exists in flax/jax; every Flax keyword a record can produce is in its callee's signature;
every param is accounted for (mapped, dropped, referenced by a template, or unsupported);
every transform and converter named exists; every record has a case. Value records are
checked numerically: activations against keras.activations, initializers by sampling.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import os
import re
import tomllib
import types
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import flax  # noqa: E402
import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from tern.engine.convert import CONVERTERS  # noqa: E402
from tern.engine.records import DROP, load_tables  # noqa: E402
from tern.weights.port import parse_transform, transform_names  # noqa: E402

RULES = Path(__file__).resolve().parents[1] / "rules"
TABLES = load_tables(RULES)
BOOKKEEPING = {"name", "dtype"}  # explicit in some Keras signatures; handled by the engine
CONTEXT = {"inputs", "key", "in_features"}  # template placeholders that are not params
KNOWN_KEYS = {
    "source", "aliases", "params", "positional", "rename", "unsupported", "defaults", "convert",
    "star_args", "target", "apply", "call_params", "call", "activation", "weights", "note",
    # proposed schema additions (see rules/layers/recurrent.toml header and the report)
    "template", "output", "init_caveats", "call_unsupported", "call_defaults", "regularizers",
    "masked_apply", "masked_template", "inert",
}
NAMESPACE = {"flax": flax, "nn": nn, "jnp": jnp, "jax": jax, "functools": functools, "np": np}


def _raw_layers() -> list[dict]:
    out = []
    for path in sorted((RULES / "layers").glob("*.toml")):
        for rec in tomllib.loads(path.read_text(encoding="utf-8")).get("layer", ()):
            out.append({**rec, "_file": path.name})
    return out


RAW = _raw_layers()
RAW_IDS = [r["source"].rsplit(".", 1)[-1] for r in RAW]


def _resolve(dotted: str):
    """Import the longest module prefix of ``dotted`` and getattr the rest
    (``support.NAME`` is the class of ``rules/support/NAME.py``)."""
    parts = dotted.split(".")
    if parts[0] == "support" and len(parts) == 2:
        if parts[1] not in SUPPORT or SUPPORT[parts[1]] is None:
            raise ImportError(f"rules/support/{parts[1]}.py does not define {parts[1]}")
        return SUPPORT[parts[1]]
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _keras_class(source: str):
    assert source.startswith("keras.layers."), source
    return getattr(keras.layers, source.rsplit(".", 1)[-1])


def _own_params(fn) -> list[str]:
    return [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    ]


def _placeholders(text: str | list[str]) -> set[str]:
    """Placeholders of a template (of all alternatives of a template list)."""
    if isinstance(text, list):
        return set().union(*map(_placeholders, text))
    return set(re.findall(r"\{(\w+)\}", text))


def _as_python(template: str) -> str:
    """A template as parseable Python: ``[[...]]`` spans kept, placeholders as names,
    ``{support:NAME}`` as ``support.NAME``."""
    text = template.replace("[[", "").replace("]]", "")
    text = re.sub(r"\{support:(\w+)\}", r"support.\1", text)
    return re.sub(r"\{(\w+)\}", r"__\1__", text)


def _support_classes() -> dict[str, type]:
    """tern's support package (``rules/support``, installed as ``tern_rules.support``): NAME -> class."""
    from tern.engine.support_module import objects

    return objects()


SUPPORT = _support_classes()


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


TARGET_ROOTS = ("flax.", "jax.", "functools.", "numpy.", "support.")


def _check_expression(text: str | list[str], where: str) -> None:
    """Every dotted target name exists; every keyword of a call to a target callable is
    in its signature (``functools.partial(f, kw=...)`` checks ``f``). A list is a list of
    template alternatives: each is checked."""
    if isinstance(text, list):
        for alternative in text:
            _check_expression(alternative, where)
        return
    tree = ast.parse(_as_python(text), mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = _dotted(node)
            if name and name.startswith(TARGET_ROOTS):
                _resolve(name)
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if not name or not name.startswith(TARGET_ROOTS):
            continue
        fn = _resolve(name)
        keywords = [k.arg for k in node.keywords if k.arg]
        if name == "functools.partial":
            fn = _resolve(_dotted(node.args[0]))
        _assert_keywords(fn, keywords, where)


def _assert_keywords(fn, keywords, where: str) -> None:
    if not keywords:
        return
    if inspect.isclass(fn) and dataclasses.is_dataclass(fn):
        allowed = {f.name for f in dataclasses.fields(fn)}
    else:
        sig = inspect.signature(fn)
        if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            return
        allowed = set(sig.parameters)
    unknown = [k for k in keywords if k not in allowed]
    assert not unknown, f"{where}: {unknown} not in the signature of {fn}"


# ------------------------------------------------------------------------------ layers


def test_enough_layer_records():
    assert len(TABLES.layers) >= 30, len(TABLES.layers)
    assert sum(1 + len(r.get("aliases", ())) for r in RAW) == len(TABLES.layers)  # one key per name, no clash


@pytest.mark.parametrize("raw", RAW, ids=RAW_IDS)
def test_record_shape(raw):
    unknown = set(raw) - KNOWN_KEYS - {"_file"}
    assert not unknown, f"unknown record keys {unknown}"
    forms = [k for k in ("target", "apply", "template") if k in raw]
    assert len(forms) == 1, f"exactly one of target/apply/template, got {forms}"
    assert raw["source"] in TABLES.layers


@pytest.mark.parametrize("raw", RAW, ids=RAW_IDS)
def test_keras_params_match_live_signature(raw):
    cls = _keras_class(raw["source"])
    live = _own_params(cls.__init__)
    params = raw.get("params", [])
    assert params == live[: len(params)], (
        f"params must be the live signature's leading params in order:\n{params}\n{live}"
    )
    assert set(live[len(params) :]) <= BOOKKEEPING, f"unmapped Keras params {live[len(params):]}"


@pytest.mark.parametrize("raw", RAW, ids=RAW_IDS)
def test_keras_call_params_match_live_signature(raw):
    cls = _keras_class(raw["source"])
    live = _own_params(cls.call)
    call_params = raw.get("call_params", ["inputs"])
    assert call_params == live[: len(call_params)], (call_params, live)
    for key in (*raw.get("call", {}), *raw.get("call_unsupported", {})):
        assert key in call_params, f"call mapping for unknown call param {key!r}"
    for key, template in raw.get("call", {}).items():
        if template != DROP:
            keyword, eq, expr = template.partition("=")
            assert eq and keyword.strip().isidentifier(), f"call template {template!r}"
            assert _placeholders(expr) <= {key}, template


@pytest.mark.parametrize("raw", RAW, ids=RAW_IDS)
def test_param_tables_name_known_params(raw):
    params = set(raw.get("params", []))
    for table in ("rename", "unsupported", "convert", "init_caveats", "regularizers"):
        unknown = set(raw.get(table, {})) - params
        assert not unknown, f"{table} names unknown params {unknown}"
    for name, conv in raw.get("convert", {}).items():
        assert conv in CONVERTERS, f"converter {conv!r} ({name}) does not exist in tern.engine.convert"
    if "target" not in raw:  # apply/template: defaults are for unpassed source params
        unknown = set(raw.get("defaults", {})) - params
        assert not unknown, f"defaults name unknown params {unknown}"
    if raw.get("activation"):
        assert raw["activation"] in params


@pytest.mark.parametrize("raw", RAW, ids=RAW_IDS)
def test_flax_names_and_keywords_exist(raw):
    where = raw["source"]
    if "target" in raw:
        target = _resolve(raw["target"])
        sig_names = {f.name for f in dataclasses.fields(target)}
        unsupported = raw.get("unsupported", {})
        produced = [
            raw.get("rename", {}).get(p, p)
            for p in raw.get("params", [])
            if p not in unsupported and p != raw.get("activation") and p not in raw.get("regularizers", {})
        ]
        produced = [k for k in produced if k != DROP] + list(raw.get("defaults", {}))
        unknown = [k for k in produced if k not in sig_names]
        assert not unknown, f"{where}: {unknown} are not fields of {raw['target']}"
        positional = raw.get("positional", 1)
        init_params = [p for p in inspect.signature(target).parameters]
        for i, p in enumerate(raw.get("params", [])[:positional]):
            assert raw.get("rename", {}).get(p, p) == init_params[i], (
                f"{where}: positional param {p!r} lands on flax parameter {init_params[i]!r}"
            )
        for value in raw.get("defaults", {}).values():
            _check_expression(value, where)
    else:
        _check_expression(raw.get("apply") or raw["template"], where)
        for value in raw.get("defaults", {}).values():
            _check_expression(value, where)
    if "output" in raw:
        assert set(raw["output"]) <= {"template", "unless"}
        assert _placeholders(raw["output"]["template"]) == {"outputs"}
        _check_expression(raw["output"]["template"], where)


@pytest.mark.parametrize("name", sorted(SUPPORT))
def test_every_support_definition_is_used(name):
    """A support definition is a class or function (or state the registry helpers share),
    and something needs it: a template (``{support:NAME}``), another support definition, or a
    programmatic rule or the engine writing its name into translated code."""
    from tern.engine.support_module import definitions

    table = definitions()
    if not name.isupper():
        assert isinstance(SUPPORT[name], (type, types.FunctionType)), f"{name} is not a class or function"
    used = any("{support:" + name + "}" in p.read_text(encoding="utf-8") for p in RULES.rglob("*.toml"))
    used = used or any(name in d.uses for d in table.values())
    code = [*(RULES / "structure").glob("*.py"), *(RULES / "testing").glob("*.py"), *(RULES.parent / "tern").rglob("*.py")]
    used = used or any(re.search(rf"\b{name}\b", p.read_text(encoding="utf-8")) for p in code)
    assert used, f"{name} (rules/support/{table[name].file}.py) is used by no table, rule or other support definition"


@pytest.mark.parametrize("raw", RAW, ids=RAW_IDS)
def test_every_param_is_accounted_for(raw):
    """No argument may be silently ignored: in an apply/template record each param is
    referenced, dropped on purpose, unsupported, the fused activation or the output
    switch (target records pass unmapped params through, checked above)."""
    if "target" in raw:
        return
    text = raw.get("apply") or raw["template"]
    referenced = _placeholders(text)
    for value in raw.get("defaults", {}).values():
        referenced |= _placeholders(value)
    assert referenced - set(raw.get("params", [])) <= CONTEXT, referenced
    handled = (
        referenced
        | {p for p, v in raw.get("rename", {}).items() if v == DROP}
        | set(raw.get("unsupported", {}))
        | {raw.get("activation")}
        | set(raw.get("regularizers", {}))
        | {raw.get("output", {}).get("unless")}
    )
    missing = [p for p in raw.get("params", []) if p not in handled]
    assert not missing, f"params silently ignored: {missing}"


@pytest.mark.parametrize("raw", RAW, ids=RAW_IDS)
def test_weight_maps(raw):
    names = transform_names()
    for entry in raw.get("weights", []):
        assert set(entry) <= {"keras", "flax", "transform"}, entry
        assert entry["flax"].split("/")[0] in ("params", "batch_stats"), entry
        name, _ = parse_transform(entry.get("transform", ""))
        assert name in names, f"transform {name!r} is not defined in tern/weights/port.py"
    if "apply" in raw:
        assert not raw.get("weights"), "a stateless layer has no weights"


def test_every_record_has_a_case():
    covered = set()
    for path in (RULES / "layers" / "cases").glob("*.toml"):
        for case in tomllib.loads(path.read_text(encoding="utf-8")).get("case", ()):
            func = ast.parse(case["keras"], mode="eval").body.func
            covered.add("keras.layers." + _dotted(func).rsplit(".", 1)[-1])
    missing = sorted({r["source"] for r in RAW} - covered)
    assert not missing, f"records without a case: {missing}"


# ------------------------------------------------------------------------------ values

ACTIVATIONS = sorted(s for (k, s) in TABLES.values if k == "activation")
INITIALIZERS = sorted(s for (k, s) in TABLES.values if k == "initializer")


def _source_object(kind: str, source: str):
    if "." not in source:
        return getattr(keras, kind + "s").get(source)
    if source.startswith("keras."):
        return _resolve(source)
    assert source.startswith("tensorflow."), source
    return _resolve(source)


def test_enough_values():
    must = {
        "activation": {"relu", "gelu", "softmax", "sigmoid", "tanh", "swish", "silu", "elu", "selu",
                       "softplus", "linear", "leaky_relu", "relu6", "hard_sigmoid", "exponential",
                       "log_softmax", "mish", "keras.activations.relu", "tensorflow.nn.relu"},
        "initializer": {"glorot_uniform", "he_normal", "random_normal", "random_uniform", "zeros",
                        "ones", "orthogonal", "lecun_normal", "truncated_normal", "variance_scaling",
                        "keras.initializers.GlorotUniform"},
    }
    for kind, names in must.items():
        missing = [n for n in names if TABLES.value(kind, n) is None]
        assert not missing, (kind, missing)


@pytest.mark.parametrize("source", ACTIVATIONS)
def test_activation_values(source):
    record = TABLES.value("activation", source)
    x = np.linspace(-5.0, 5.0, 40, dtype=np.float32).reshape(4, 10)
    fn = _source_object("activation", source)
    expected = np.asarray(fn(tf.constant(x)))
    if record.target == "None":
        actual = x
    else:
        _check_expression(record.target, source)
        actual = np.asarray(eval(record.target, NAMESPACE)(jnp.asarray(x)))  # noqa: S307
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
    if record.named:  # the named definition written where code compares the value
        name = re.fullmatch(r"\{support:(\w+)\}", record.named).group(1)
        named = getattr(importlib.import_module(f"tern_rules.support.{name}"), name)
        np.testing.assert_allclose(np.asarray(named(jnp.asarray(x))), expected, rtol=1e-5, atol=1e-6)


def _keras_initializer(source: str):
    obj = _source_object("initializer", source)
    return obj() if inspect.isclass(obj) else obj


def _initializer_groups() -> dict[tuple[str, str], list[str]]:
    """Spellings of one Keras initializer class with one target are sampled once."""
    groups: dict[tuple[str, str], list[str]] = {}
    for source in INITIALIZERS:
        cls = type(_keras_initializer(source)).__name__
        groups.setdefault((cls, TABLES.value("initializer", source).target), []).append(source)
    return groups


INIT_GROUPS = _initializer_groups()


def test_initializer_spellings_agree():
    """Every spelling of a Keras initializer class maps to the same target."""
    by_class: dict[str, set[str]] = {}
    for cls, target in INIT_GROUPS:
        by_class.setdefault(cls, set()).add(target)
    assert all(len(targets) == 1 for targets in by_class.values()), by_class


@pytest.mark.parametrize("source", [v[0] for v in INIT_GROUPS.values()])
@pytest.mark.parametrize("shape", [(256, 192), (3, 3, 48, 64)], ids=["dense", "conv"])
def test_initializer_values(source, shape):
    """Same distribution: identical for constants; else the same spread (3%), quantiles
    within 5% of the spread, and for bounded distributions (uniform, truncated normal)
    the same bound (3%)."""
    record = TABLES.value("initializer", source)
    _check_expression(record.target, source)
    identity = "dentity" in source
    if identity:
        shape = (40, 48)
    keras.utils.set_random_seed(0)
    keras_init = _keras_initializer(source)
    expected = np.asarray(keras_init(shape, dtype="float32"))
    flax_init = eval(record.target, NAMESPACE)  # noqa: S307
    actual = np.asarray(flax_init(jax.random.key(0), shape, jnp.float32))
    assert actual.shape == expected.shape and actual.dtype == np.float32
    if identity or np.all(expected == expected.flat[0]):
        np.testing.assert_array_equal(actual, expected)
        return
    spread = expected.std()
    np.testing.assert_allclose(actual.std(), spread, rtol=0.03)
    qs = [0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95]
    np.testing.assert_allclose(
        np.quantile(actual, qs), np.quantile(expected, qs), atol=0.05 * spread, rtol=0
    )
    unbounded = "normal(stddev" in record.target or "orthogonal" in record.target
    if not unbounded:
        np.testing.assert_allclose(np.abs(actual).max(), np.abs(expected).max(), rtol=0.03)


def test_every_keras_alias_of_a_table_layer_is_listed_and_is_that_layer():
    """``MaxPool2D`` is ``MaxPooling2D``: a layer's other names in the installed Keras are its aliases."""
    names: dict[type, set[str]] = {}
    for name in dir(keras.layers):
        obj = getattr(keras.layers, name)
        if inspect.isclass(obj):
            names.setdefault(obj, set()).add(f"keras.layers.{name}")
    for raw in RAW:
        cls = _resolve(raw["source"])
        assert {raw["source"], *raw.get("aliases", ())} == names[cls], raw["source"]
