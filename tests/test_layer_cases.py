"""Layer cases (rules/layers/cases/*.toml): golden translations and numeric equivalence.

One process, TensorFlow and JAX both imported. For every case:

* golden: ``translate_source("import tensorflow as tf\\nlayer = <keras>")`` must put exactly
  ``flax`` on the right-hand side, or leave a ``TODO(tern)`` when ``flax = "TODO"``;
* numeric: the Keras layer is built on a fixed random input and every one of its variables
  is set to fresh random values (positive for variances); the ``flax`` expression is
  evaluated, initialized, and its variables are REPLACED by
  ``tern.weights.port.port_layer_weights(record, keras_layer)`` after checking that the ported
  tree has exactly the structure and shapes ``init`` produced (optional ``leaves = n``:
  the Keras layer and the flax init tree both hold exactly ``n`` arrays; optional
  ``same_init = ["bias"]``: those Keras variables, as Keras initialized them, equal the
  flax init values, for deterministic initializers); then outputs are compared in
  inference mode (``training=False`` where the layer has one) with rtol = atol = 1e-5
  (float32) unless the case states its own tolerances. TODO cases with a ``port_flax``
  expression check their weight map against that hand-written flax module.

Templates may name a support definition (``{support:KerasLSTMCell}``, rules/support/):
the translation then carries its definition, so the numeric check evaluates ``flax`` in
the namespace of the executed translated module (``port_flax`` of TODO cases: with the
support files executed as written).

The flax call keywords come from the record's ``call`` templates applied to the case's
``call`` keywords, so the numeric check exercises the table data itself. A fused
activation or a record ``output`` (Keras ``return_sequences=False``) wraps the module in
``nn.Sequential``; the ported variables are then nested under ``layers_0``. Regularizer
arguments wrap it in ``KerasRegularized`` (variables under ``layer``); its sown loss terms
must then match Keras' ``layer.losses`` in number and sum.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import sys
import tomllib
import types
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from tern.engine.records import load_tables  # noqa: E402
from tern.engine.support_module import objects  # noqa: E402
from tern.engine.translate import translate_source  # noqa: E402
from tern.weights.port import port_layer_weights  # noqa: E402

RULES = Path(__file__).resolve().parents[1] / "rules"
TABLES = load_tables(RULES)
DEFAULT_RTOL = 1e-5
DEFAULT_ATOL = 1e-5


def _cases() -> list[dict]:
    cases = []
    for path in sorted((RULES / "layers" / "cases").glob("*.toml")):
        for case in tomllib.loads(path.read_text(encoding="utf-8")).get("case", ()):
            cases.append({**case, "_file": path.name})
    return cases


CASES = _cases()
IDS = [c["id"] for c in CASES]
assert len(IDS) == len(set(IDS)), "case ids must be unique"

NAMESPACE = {"nn": nn, "jnp": jnp, "jax": jax, "functools": functools, "np": np}


def _record(case: dict):
    call = ast.parse(case["keras"], mode="eval").body
    assert isinstance(call, ast.Call)
    name = "keras.layers." + ast.unparse(call.func).rsplit(".", 1)[-1]
    return TABLES.layers[name]


def _keras_kwargs(case: dict) -> dict:
    call = ast.parse(case["keras"], mode="eval").body
    return {k.arg: k.value for k in call.keywords}


# ---------------------------------------------------------------------------- golden


def _rhs(code: str) -> str:
    for line in code.splitlines():
        if line.startswith("layer = "):
            return line[len("layer = ") :].strip()
    raise AssertionError(f"no `layer = ` line in:\n{code}")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_golden(case):
    result = translate_source(f"import tensorflow as tf\nlayer = {case['keras']}\n")
    if case["flax"] == "TODO":
        assert "TODO(tern)" in result.code, result.code
        func = ast.unparse(ast.parse(case["keras"], mode="eval").body.func)
        assert _rhs(result.code).startswith(func + "("), "a refused layer must stay as written"
        return
    assert _rhs(result.code) == case["flax"], result.code


# ---------------------------------------------------------------------------- numeric

_SPEC = re.compile(r"^(\w+)\[([\d,\s]*)\]$")


def _inputs(case: dict) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    specs = case["input"] if isinstance(case["input"], list) else [case["input"]]
    out = []
    for spec in specs:
        m = _SPEC.match(spec.strip())
        assert m, f"bad input spec {spec!r}"
        dtype = np.dtype(m.group(1))
        shape = tuple(int(s) for s in m.group(2).split(",") if s.strip())
        if dtype.kind in "iu":
            out.append(rng.integers(0, case.get("maxval", 10), size=shape).astype(dtype))
        else:
            out.append((case.get("scale", 1.0) * rng.normal(size=shape)).astype(dtype))
    return out


def _keras_call(case: dict, layer, xs):
    kwargs = eval(f"dict({case.get('call', '')})", {"tf": tf, "np": np})  # noqa: S307
    if case.get("list_input"):
        return layer(list(xs), **kwargs)
    return layer(*xs, **kwargs)


def _randomize(layer) -> None:
    """Fresh random values for every Keras variable (positive for variances), so that
    zero biases or unit scales cannot hide a wrong weight map."""
    rng = np.random.default_rng(1)
    for v in layer.weights:
        value = rng.normal(scale=0.5, size=tuple(v.shape)).astype(v.dtype)
        if "variance" in v.path:
            value = np.abs(value) + 0.5
        v.assign(value)


def _flax_call_kwargs(record, case: dict) -> dict:
    """The record's ``call`` templates applied to the case's Keras call keywords."""
    kwargs = {}
    source = eval(f"dict({case.get('call', '')})", {"tf": tf, "np": np})  # noqa: S307
    for name, value in source.items():
        template = record.call.get(name)
        assert template is not None, f"{record.source}: call keyword {name!r} has no mapping"
        if template == "-":
            continue
        keyword, _, expr = template.partition("=")
        scope = {**NAMESPACE, "__value": jnp.asarray(value) if isinstance(value, np.ndarray) else value}
        kwargs[keyword.strip()] = eval(expr.format(**{name: "__value"}), scope)  # noqa: S307
    return kwargs


def _shapes(tree) -> dict[str, tuple]:
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(path): tuple(np.shape(leaf)) for path, leaf in flat}


def _wrapped(record, case: dict) -> bool:
    """Whether the translation wraps the layer's module in ``nn.Sequential``: a fused
    Keras activation, or the record's ``output`` (Keras ``return_sequences=False``)."""
    kwargs = _keras_kwargs(case)
    if record.activation and record.activation in kwargs:
        value = ast.literal_eval(kwargs[record.activation]) if isinstance(
            kwargs[record.activation], ast.Constant) else "symbol"
        if value not in (None, "linear"):
            return True
    if record.output_template is not None:
        unless = kwargs.get(record.output_unless) if record.output_unless else None
        return unless is None or (isinstance(unless, ast.Constant) and unless.value is False)
    return False


def _namespace(case: dict) -> dict:
    """Where ``flax`` / ``port_flax`` is evaluated: NAMESPACE plus the definitions the
    translation generated (support classes), or, for TODO cases, the support files."""
    module = types.ModuleType(f"tern_case_{case['id']}")  # flax dataclasses need a real module
    sys.modules[module.__name__] = module
    module.__dict__.update(NAMESPACE)
    if case["flax"] != "TODO":
        code = translate_source(f"import tensorflow as tf\nlayer = {case['keras']}\n", support_module="tern_rules.support").code
        exec(compile(code, f"<translation of {case['id']}>", "exec"), module.__dict__)  # noqa: S102
    else:
        module.__dict__.update(objects())
    return module.__dict__


def _check_same_init(record, name: str, fresh: dict, init_vars, under: str | None) -> None:
    """The Keras variable ``name`` as Keras initialized it equals the flax ``init`` value at
    its mapped path (for deterministic initializers: zeros, ones, unit_forget_bias)."""
    entry = next(e for e in record.weights if e.keras == name)
    assert not entry.transform, f"same_init needs a 1:1 entry, {name!r} has {entry.transform!r}"
    (keras_value,) = [v for p, v in fresh.items() if p.split("/")[-1] == name]
    collection, *parts = entry.flax.split("/")
    node = init_vars[collection]
    for part in ([under] if under else []) + parts:
        node = node[part]
    np.testing.assert_array_equal(np.asarray(node), keras_value)


def _check_losses(case: dict, keras_layer, updates) -> None:
    """The regularization terms the wrapper sowed: as many as Keras' ``layer.losses`` after
    its last call (weight penalties from its current weights, activity penalties divided by
    the batch size), with the same sum."""
    terms = jax.tree_util.tree_leaves(updates.get("losses", {}))
    expected = [np.asarray(t) for t in keras_layer.losses]
    assert len(terms) == len(expected), (len(terms), len(expected))
    np.testing.assert_allclose(
        np.sum([np.asarray(t) for t in terms]), np.sum(expected),
        rtol=case.get("rtol", DEFAULT_RTOL), atol=case.get("atol", DEFAULT_ATOL),
    )


NUMERIC = [c for c in CASES if c["flax"] != "TODO" or "port_flax" in c]


@pytest.mark.parametrize("case", NUMERIC, ids=[c["id"] for c in NUMERIC])
def test_numeric(case):
    record = _record(case)
    xs = _inputs(case)
    layer = eval(case["keras"], {"tf": tf, "np": np})  # noqa: S307
    _keras_call(case, layer, xs)  # build
    fresh = {v.path: np.array(v.numpy()) for v in layer.weights}  # as Keras initialized them
    _randomize(layer)
    expected = np.asarray(_keras_call(case, layer, xs))

    text = case["flax"] if case["flax"] != "TODO" else case["port_flax"]
    flax_obj = eval(text, _namespace(case))  # noqa: S307
    args = [list(map(jnp.asarray, xs))] if case.get("list_input") else [jnp.asarray(x) for x in xs]

    if isinstance(flax_obj, nn.Module):
        kwargs = _flax_call_kwargs(record, case)
        rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
        init_vars = flax_obj.init(rngs, *args, **kwargs)
        regularized = type(flax_obj).__name__ == "KerasRegularized"
        init_vars = {c: t for c, t in init_vars.items() if c != "losses"}  # loss terms, not weights
        under = "layers_0" if isinstance(flax_obj, nn.Sequential) and _wrapped(record, case) else None
        under = "layer" if regularized else under
        ported = port_layer_weights(record, layer, under=under)
        assert _shapes(ported) == _shapes(init_vars), (
            f"ported tree differs from init:\nported {_shapes(ported)}\ninit   {_shapes(init_vars)}"
        )
        if "leaves" in case:  # variable counts agree without any bookkeeping
            assert len(layer.weights) == case["leaves"], [v.path for v in layer.weights]
            assert len(jax.tree_util.tree_leaves(init_vars)) == case["leaves"], _shapes(init_vars)
        for name in case.get("same_init", ()):
            _check_same_init(record, name, fresh, init_vars, under)
        ported = jax.tree_util.tree_map(jnp.asarray, ported)
        actual = flax_obj.apply(ported, *args, **kwargs)
        if regularized:
            _check_losses(case, layer, flax_obj.apply(ported, *args, mutable=["losses"], **kwargs)[1])
    else:
        assert not record.weights, f"{record.source} has weights but translated to a function"
        actual = flax_obj(*args)
    actual = np.asarray(actual)

    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(
        actual,
        expected,
        rtol=case.get("rtol", DEFAULT_RTOL),
        atol=case.get("atol", DEFAULT_ATOL),
    )


def test_every_layer_record_has_a_case():
    covered = {_record(c).source for c in CASES}
    missing = sorted(set(r.source for r in TABLES.layers.values()) - covered)
    assert not missing, f"layer records without a case: {missing}"
