"""The API tables (rules/api/*.toml) against the installed TensorFlow, Keras, JAX, Flax, optax.

Checks, per record:
* every source symbol and alias exists, and an alias is the very same TF/Keras object;
* the record's params are the live source signature, in positional order (names TF reads
  from ``**kwargs`` are accepted when the defining module spells them as a string);
* every target, and every dotted jax/flax/optax/numpy name in templates and defaults,
  resolves in the installed library;
* for target records, every keyword the engine can produce (renames, kept names, defaults)
  is accepted by the target's signature, and leading positional params fit its positional
  slots (with matching names where the target slot can also be passed by keyword);
* templates are valid Python for every choice of optional spans, and use only known params;
* renames/unsupported/convert/defaults/inert refer to real params and known converters,
  inert values are literals, and every ``{support:NAME}`` has its rules/support/NAME.py;
* every non-trivial record explains itself in ``note``.

Sources are ``tensorflow.*`` and the Keras APIs translated as calls: ``keras.ops``,
``keras.optimizers`` (schedules included), ``keras.losses`` and ``keras.metrics``.

TensorFlow is imported once at module level (a cost paid once per session).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import re
from pathlib import Path

import pytest

import keras  # noqa: E402  (after TF would also work; keras 3 is standalone)
import tensorflow as tf
import tf_keras  # Keras 2 APIs Keras 3 dropped (keras.backend.random_bernoulli, BaseRandomLayer's RandomGenerator); tern reads tf_keras as keras

from tern.engine.records import DROP, ApiRecord, load_tables
from tern.engine.templates import RNG_KEYS
from tern.engine.support_module import definitions as support_definitions

RULES = Path(__file__).resolve().parents[1] / "rules"
API_DIR = RULES / "api"
CONVERTERS = {"activation", "initializer", "dtype", "padding", "tuple1", "tuple2", "tuple3", "negate",
              "tf_window", "tf_window1", "tf_window2", "tf_window3"}
TARGET_ROOTS = ("jax", "flax", "optax", "numpy")
DOTTED = re.compile(r"(?<![\w.])(?:jax|flax|optax|numpy)(?:\.\w+)+")
PLACEHOLDER = re.compile(r"\{(\w+)\}")
SPAN = re.compile(r"\[\[(.*?)\]\]", re.S)
SUPPORT = re.compile(r"\{support:(\w+)\}")
SUPPORT_DIR = RULES / "support"
KERAS_SOURCES = ("keras.ops.", "keras.optimizers.", "keras.losses.", "keras.metrics.", "keras.regularizers.", "keras.callbacks.",
                 "keras.backend.", "keras.activations.", "keras.layers.", "keras.utils.", "keras.initializers.",
                 "keras.src.backend.RandomGenerator.")
RNG_PLACEHOLDERS = set(RNG_KEYS)  # template placeholders for PRNG keys, not params

TABLES = load_tables(RULES)
MY_FILES = sorted(p.name for p in API_DIR.glob("*.toml"))


def _records() -> list[ApiRecord]:
    seen, out = set(), []
    for record in TABLES.api.values():
        if id(record) in seen or not record.origin.startswith("api/"):
            continue
        if record.source.startswith(("tensorflow.", *KERAS_SOURCES)):
            seen.add(id(record))
            out.append(record)
    return sorted(out, key=lambda r: r.source)


RECORDS = _records()
IDS = [r.source for r in RECORDS]


# -- helpers --------------------------------------------------------------------------


def source_object(name: str):
    parts = name.split(".")
    if parts[0] == "tensorflow":
        obj = tf
    elif parts[0] == "keras":
        # keras 3 first; then what tf.keras keeps of Keras 2 (tf.keras.backend.sum), then tf_keras
        # (keras.__internal__.layers.BaseRandomLayer)
        for obj in (keras, tf.keras, tf_keras):
            if _has_path(obj, parts[1:]):
                break
    else:
        raise AssertionError(f"{name}: source names start with tensorflow. or keras.")
    return _attribute_path(obj, parts[1:])


def _attribute_path(obj, parts):
    for part in parts:
        obj = getattr(obj, part)
    return obj


def _has_path(obj, parts) -> bool:
    for part in parts:
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def target_object(name: str):
    parts = name.split(".")
    assert parts[0] in TARGET_ROOTS, f"{name}: targets live in {TARGET_ROOTS}"
    module = None
    for i in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:i]))
            break
        except ImportError:
            continue
    assert module is not None, f"{name}: no importable module prefix"
    obj = module
    for part in parts[i:]:
        obj = getattr(obj, part)
    return obj


def live_params(fn) -> tuple[list[str], bool]:
    """Parameter names in order (``*args`` included by name) and whether ``**kwargs`` exists;
    a method taken from its class (``RandomGenerator.random_uniform``) without ``self``."""
    sig = inspect.signature(fn)
    method = inspect.isfunction(fn) and "." in fn.__qualname__ and "<locals>" not in fn.__qualname__
    if isinstance(fn, type) and {p.kind for p in sig.parameters.values()} <= {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}:
        # a metaclass's __call__(*args, **kwargs) hides the constructor (tf.lookup.StaticHashTable): __init__ has it
        sig, method = inspect.signature(fn.__init__), True
    names, var_kw = [], False
    for i, p in enumerate(sig.parameters.values()):
        if method and i == 0 and p.name == "self":
            continue
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            var_kw = True
        else:
            names.append(p.name)
    return names, var_kw


def kwargs_names_in_module(fn) -> str:
    """The source that names ``fn``'s ``**kwargs`` keys: its module's, and where ``fn`` builds
    a layer with them (``keras.layers.add``: ``Add(**kwargs)(inputs)``), the base Layer's."""
    module = inspect.getmodule(inspect.unwrap(fn))
    try:
        text = inspect.getsource(module)
    except (OSError, TypeError):
        return ""
    if re.search(r"\*\*kwargs\)\(", text):
        text += " ".join(f"'{p}'" for p in inspect.signature(keras.layers.Layer.__init__).parameters)
    return text


def alternatives(record) -> list[str]:
    """A record's template(s): a list of templates is a list of alternatives."""
    if record.template is None:
        return []
    if not isinstance(record.template, list):
        return [record.template]
    return [a["template"] if isinstance(a, dict) else a for a in record.template]  # guarded forms too


def template_variants(template: str) -> list[str]:
    """The template with each combination of its [[...]] spans kept or removed."""
    spans = SPAN.findall(template)
    variants = []
    for keep in itertools.product((True, False), repeat=len(spans)):
        it = iter(keep)
        variants.append(SPAN.sub(lambda m: m.group(1) if next(it) else "", template))
    return variants


def as_python(text: str) -> str:
    text = SUPPORT.sub(lambda m: m.group(1), text)  # a support definition is called by its name
    return PLACEHOLDER.sub(lambda m: f"__p_{m.group(1)}", text)


def nontrivial(record: ApiRecord) -> bool:
    sig = record.signature
    dropped = [k for k, v in sig.rename.items() if v == DROP and k != "name"]
    return bool(record.template or sig.defaults or sig.unsupported or dropped or sig.positional == 0)


# -- table-level ----------------------------------------------------------------------


def test_enough_records():
    assert len(RECORDS) >= 150, f"only {len(RECORDS)} tf/keras.ops records in rules/api"
    assert len({r.source for r in RECORDS}) == len(RECORDS)


def test_files_present():
    expected = {
        "math.toml", "reductions.toml", "shape.toml", "indexing.toml", "nn.toml", "linalg.toml",
        "fft.toml", "random.toml", "control_flow.toml", "dtypes.toml", "creation.toml", "keras_ops.toml",
    }
    assert expected <= set(MY_FILES)


def test_tables_load_without_duplicates():
    # load_tables raises on a name defined twice; loading again from disk proves it.
    load_tables(RULES)


# -- per record -------------------------------------------------------------------------


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_source_and_aliases_exist(record: ApiRecord):
    if record.source.startswith("keras."):
        assert record.source.startswith(KERAS_SOURCES), f"keras records here are {KERAS_SOURCES}"
    obj = source_object(record.source)
    for alias in record.aliases:
        other = source_object(alias)
        assert other is obj, f"alias {alias} is not the same object as {record.source}"


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_params_match_live_signature(record: ApiRecord):
    sig = record.signature
    obj = source_object(record.source)
    if record.constant is not None:  # a name for a literal: the literal is the source's value
        assert ast.literal_eval(record.constant) == obj, f"{record.source} is {obj!r}, not {record.constant}"
        assert record.target is None and record.template is None and not sig.params
        return
    if not sig.params and record.template is None:
        assert record.target, "a name record has a target"
        if isinstance(obj, type) and not isinstance(obj, tf.dtypes.DType):  # a type for annotations and isinstance
            if SUPPORT.fullmatch(record.target):  # a base class tern supplies (KerasLoss)
                assert SUPPORT.fullmatch(record.target).group(1) in support_definitions()
                return
            module, _, attr = record.target.rpartition(".")
            assert isinstance(getattr(importlib.import_module(module), attr), type), f"{record.target} is not a type"
            return
        assert not callable(obj) or isinstance(obj, tf.dtypes.DType), f"{record.source} is callable: list its params"
        return
    live, var_kw = live_params(obj)
    listed = [p.lstrip("*") for p in sig.params]  # `*inputs` names the live *inputs
    head = listed[: len(live)]
    extra = listed[len(live):]
    assert head == live[: len(head)], (
        f"{record.source}: params {listed} do not follow the live signature {live}"
    )
    if len(listed) < len(live):
        missing = live[len(listed):]
        # the engine refuses unknown keywords, so an unlisted param is only allowed when the
        # record is deliberately narrowed (variadic sources), and the note must say why
        assert record.note and any(
            p.kind is inspect.Parameter.VAR_POSITIONAL
            for p in inspect.signature(obj).parameters.values()
        ), f"{record.source}: live params {missing} are not listed"
    if extra:
        assert var_kw, f"{record.source}: {extra} are not in the live signature {live}"
        text = kwargs_names_in_module(obj)
        for name in extra:
            assert f"'{name}'" in text or f'"{name}"' in text, (
                f"{record.source}: {name} is neither a parameter nor a **kwargs key of its module"
            )


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_keys_refer_to_params(record: ApiRecord):
    sig = record.signature
    params = set(sig.params)
    for what, keys in (
        ("rename", sig.rename), ("unsupported", sig.unsupported), ("convert", sig.convert), ("inert", sig.inert),
    ):
        unknown = set(keys) - params
        assert not unknown, f"{record.source}: {what} names unknown params {sorted(unknown)}"
    for name, conv in sig.convert.items():
        assert conv in CONVERTERS, f"{record.source}: unknown converter {conv!r} for {name}"
    for name, reason in sig.unsupported.items():
        assert reason.strip(), f"{record.source}: unsupported {name} needs a reason"
    for name, values in sig.inert.items():
        assert values, f"{record.source}: inert {name} lists no value"
        for value in values:
            ast.literal_eval(value)  # a literal the engine can compare arguments with
    assert 0 <= sig.positional <= max(len(sig.params), 1)
    if record.todo and record.target is None and record.template is None:
        assert sig.params, f"{record.source}: a never-translated call still lists its params"
    elif record.constant is not None:
        assert record.target is None and record.template is None, "a constant record has no target or template"
    elif record.template is not None:
        assert record.target is None, "a record has a target or a template, not both"
        # template defaults are values for SOURCE params that were not passed
        assert set(sig.defaults) <= params, f"{record.source}: template defaults {sorted(sig.defaults)}"
    else:
        assert record.target, f"{record.source}: no target and no template"


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_dotted_target_names_resolve(record: ApiRecord):
    texts = alternatives(record) + list(record.signature.defaults.values())
    names = set(DOTTED.findall(" ".join(texts)))
    if record.target and not SUPPORT.fullmatch(record.target):
        names.add(record.target)
    for name in SUPPORT.findall(record.target or ""):
        assert name in support_definitions(), f"{record.source}: no support definition {name} in rules/support"
    for name in sorted(names):
        try:
            target_object(name)
        except AttributeError as exc:
            raise AssertionError(f"{record.source}: {name} does not resolve ({exc})") from None


@pytest.mark.parametrize("record", [r for r in RECORDS if r.template], ids=[r.source for r in RECORDS if r.template])
def test_template_is_python(record: ApiRecord):
    sig = record.signature
    params = set(sig.params) | RNG_PLACEHOLDERS
    for template in alternatives(record):
        _check_template(record, sig, params, template)


def _check_template(record, sig, params, template):
    for kind in re.findall(r"\{table:(\w+)\}", template):
        assert kind in {"activation", "initializer", "regularizer"}, f"{record.source}: no value table {kind!r}"
    template = re.sub(r"\{table:\w+\}", "TABLE", template)
    for name in SUPPORT.findall(template):
        assert name in support_definitions(), f"{record.source}: no support definition {name} in rules/support"
    for inner in SPAN.findall(template):
        assert PLACEHOLDER.search(inner), f"{record.source}: span [[{inner}]] has no placeholder"
    used = set(PLACEHOLDER.findall(template))
    assert used <= params, f"{record.source}: unknown placeholders {sorted(used - params)}"
    # every placeholder outside spans must be a param the caller always passes or has a default
    outside = set(PLACEHOLDER.findall(SPAN.sub("", template))) - RNG_PLACEHOLDERS
    dropped = {k for k, v in sig.rename.items() if v == DROP} | set(sig.unsupported)
    if sig.params and sig.params[0] in sig.unsupported:
        dropped.discard(sig.params[0])  # an always-refused record: the template is never used
    assert not (outside & dropped), f"{record.source}: dropped/unsupported params used in the template"
    for variant in template_variants(template):
        try:
            ast.parse(as_python(variant), mode="eval")
        except SyntaxError as exc:
            raise AssertionError(f"{record.source}: template variant is not Python: {variant!r} ({exc})") from None
    for name, default in sig.defaults.items():
        ast.parse(as_python(default), mode="eval")


def _accepts_keyword(sig: inspect.Signature, name: str) -> bool:
    p = sig.parameters.get(name)
    if p is not None and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
        return True
    return any(q.kind is inspect.Parameter.VAR_KEYWORD for q in sig.parameters.values())


@pytest.mark.parametrize("record", [r for r in RECORDS if r.target and r.signature.params],
                         ids=[r.source for r in RECORDS if r.target and r.signature.params])
def test_target_keywords_accepted(record: ApiRecord):
    sig = record.signature
    target = target_object(record.target)
    tsig = inspect.signature(target)
    tparams = list(tsig.parameters.values())
    positional_slots = [p for p in tparams if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    has_var_pos = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in tparams)
    problems = []
    if sig.positional > len(positional_slots) and not has_var_pos:
        problems.append(f"positional={sig.positional} but {record.target} has {len(positional_slots)} positional slots")
    for index, name in enumerate(sig.params):
        if sig.rename.get(name) == DROP or name in sig.unsupported:
            continue
        keyword = sig.rename.get(name, name)
        if name.startswith("*"):
            if not has_var_pos:
                problems.append(f"{name} is variadic but {record.target} takes no *args")
            continue
        if index < sig.positional:
            # emitted positionally when passed positionally; as keyword `keyword` otherwise
            if index < len(positional_slots):
                slot = positional_slots[index]
                deliberate = index == 0 and "uncalled references" in record.note
                if slot.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and slot.name != keyword and not deliberate:
                    problems.append(f"{name}: target positional slot {index} is `{slot.name}`, rename it (now `{keyword}`)")
            continue
        if not _accepts_keyword(tsig, keyword):
            problems.append(f"{name} -> `{keyword}=` not accepted by {record.target}{tsig}")
    for keyword in sig.defaults:
        if not _accepts_keyword(tsig, keyword):
            problems.append(f"default `{keyword}=` not accepted by {record.target}")
    assert not problems, f"{record.source}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("record", RECORDS, ids=IDS)
def test_nontrivial_records_have_notes(record: ApiRecord):
    if nontrivial(record):
        assert len(record.note.strip()) >= 15, f"{record.source}: explain the mapping in `note`"
