"""Golden and numeric cases for the API tables (rules/api/cases/*.toml).

Each ``[[case]]``::

    id = "reduce_sum_axis"                    # optional, unique; default: file + index
    before = "tf.reduce_sum(x, axis=1)"       # the right-hand side of `y = ...` in TF code
    after = "jnp.sum(x, axis=1)"              # the expected translation (standard aliases)
    inputs = { x = "float32[2,3]" }           # optional: enables the numeric comparison
    prelude = "def f(a):\n    return a"      # optional code placed before `y = ...`
    todo = "is not supported"                # optional: expect a TODO(tern) whose text
                                              #   contains this, and the call left unchanged
    random = true                             # compare shapes and dtype kinds only
    test_file = true                          # translate as a test file (explicit PRNG keys)
    numeric = false                           # golden only (reason in `why`)
    why = "..."                               # why the case exists / is golden-only

An ``after`` may call support definitions (``keras_loss``, ...): the JAX namespace holds every
``rules/support/*.py``, as a translated file would after tern inserted the ones it uses.

Input specs: ``dtype[shape]`` with optional ``:lo:hi`` (uniform floats in [lo, hi),
integers in [lo, hi] inclusive), or ``=expr`` evaluated with ``np`` in scope.

(a) golden: ``import tensorflow as tf / import keras / from keras import ops`` + prelude +
``y = <before>`` goes through ``tern.engine.translate.translate_source`` and the output must
contain the line ``y = <after>`` (or, for ``todo`` cases, the untouched line and the TODO).
(b) numeric: ``before`` is evaluated with TensorFlow on NumPy inputs, ``after`` with JAX on
the same inputs (as jax arrays); the structures (tuple/list lengths), shapes and dtype
kinds must agree, then the values with ``np.testing.assert_allclose(rtol=RTOL, atol=ATOL)``.
Everything runs in ONE pytest process, parametrized by case id.
"""

from __future__ import annotations

import ast
import hashlib
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

import tensorflow as tf  # noqa: E402  (imported once for the session)
import keras
from keras import ops

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from tern.engine.translate import translate_source

RTOL = 1e-5
ATOL = 1e-6

CASES_DIR = Path(__file__).resolve().parents[1] / "rules" / "api" / "cases"
SUPPORT_DIR = CASES_DIR.parents[1] / "support"
HEADER = "import tensorflow as tf\nimport keras\nfrom keras import ops\n"
SPEC = re.compile(r"^(?P<dtype>[a-z0-9_]+)\[(?P<shape>[0-9, ]*)\](?::(?P<lo>-?[0-9.e+-]+):(?P<hi>-?[0-9.e+-]+))?$")


def _load_cases() -> list[dict]:
    cases, ids = [], set()
    for path in sorted(CASES_DIR.glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        for i, case in enumerate(data.get("case", ())):
            case = dict(case)
            case.setdefault("id", f"{path.stem}-{i}")
            case["file"] = path.name
            assert case["id"] not in ids, f"duplicate case id {case['id']}"
            ids.add(case["id"])
            cases.append(case)
    return cases


CASES = _load_cases()
NUMERIC = [c for c in CASES if c.get("inputs") is not None and not c.get("todo") and c.get("numeric", True)]


def test_case_count():
    assert len(CASES) >= 120, f"only {len(CASES)} cases"


# -- golden ---------------------------------------------------------------------------


def _translate(case: dict) -> str:
    prelude = case.get("prelude", "")
    if prelude and not prelude.endswith("\n"):
        prelude += "\n"
    source = HEADER + prelude + f"y = {case['before']}\n"
    return translate_source(source, is_test=bool(case.get("test_file"))).code


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_golden(case: dict):
    out = _translate(case)
    lines = [line.strip() for line in out.splitlines()]
    if case.get("todo"):
        assert f"y = {case['before']}" in lines, f"the call should be left as written:\n{out}"
        todos = [line for line in lines if "TODO(tern)" in line]
        assert todos, f"expected a TODO(tern) comment:\n{out}"
        assert any(case["todo"] in line for line in todos), f"no TODO mentions {case['todo']!r}:\n{out}"
        return
    expected = f"y = {case['after']}"
    assert expected in lines, f"expected line\n  {expected}\nin output:\n{out}"
    if case["after"] != case["before"]:
        assert not any("TODO(tern)" in line for line in lines), f"unexpected TODO:\n{out}"


# -- numeric ----------------------------------------------------------------------------


def _seed(case_id: str) -> int:
    return int.from_bytes(hashlib.sha256(case_id.encode()).digest()[:4], "little")


def make_input(spec, rng: np.random.Generator):
    if not isinstance(spec, str):
        return np.asarray(spec)
    if spec.startswith("="):
        return eval(spec[1:], {"np": np})  # noqa: S307 - test data written in this repo
    match = SPEC.match(spec)
    assert match, f"bad input spec {spec!r}"
    dtype = np.dtype(match["dtype"])
    shape = tuple(int(s) for s in match["shape"].replace(" ", "").split(",") if s)
    lo, hi = match["lo"], match["hi"]
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        lo, hi = (int(float(lo)), int(float(hi))) if lo is not None else (0, 9)
        return rng.integers(lo, hi + 1, size=shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if lo is not None:
        return rng.uniform(float(lo), float(hi), size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def support_namespace() -> dict:
    """Every support definition (tern_rules.support), as a translated file imports the ones it uses."""
    from tern.engine.support_module import objects

    return objects()


SUPPORT = support_namespace()


def _evaluate(expr: str, prelude: str, namespace: dict):
    if prelude:
        exec(prelude, namespace)  # noqa: S102
    return eval(expr, namespace)  # noqa: S307


def normalize(value):
    """Nested tuples/lists (namedtuples become tuples) of NumPy arrays."""
    if isinstance(value, (tuple, list)):
        items = [normalize(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    return np.asarray(value)


def _int_sequence(value) -> bool:
    return isinstance(value, (tuple, list)) and all(
        isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind in "iu" for v in value
    )


def compare(tf_value, jax_value, *, values: bool, path: str = "y") -> None:
    # tf.shape/tf.size give int tensors where jnp.shape/jnp.size give Python ints: a
    # sequence of scalar ints on one side matches a 1-D int array on the other.
    if _int_sequence(jax_value) and isinstance(tf_value, np.ndarray) and tf_value.ndim == 1:
        jax_value = np.asarray(jax_value)
    if _int_sequence(tf_value) and isinstance(jax_value, np.ndarray) and jax_value.ndim == 1:
        tf_value = np.asarray(tf_value)
    if isinstance(tf_value, (tuple, list)) or isinstance(jax_value, (tuple, list)):
        assert isinstance(tf_value, (tuple, list)) and isinstance(jax_value, (tuple, list)), (
            f"{path}: structure differs ({type(tf_value).__name__} vs {type(jax_value).__name__})"
        )
        assert len(tf_value) == len(jax_value), f"{path}: {len(tf_value)} vs {len(jax_value)} elements"
        for i, (a, b) in enumerate(zip(tf_value, jax_value)):
            compare(a, b, values=values, path=f"{path}[{i}]")
        return
    assert tf_value.shape == jax_value.shape, f"{path}: shape {tf_value.shape} vs {jax_value.shape}"
    kind = lambda d: "i" if d.kind in "iu" else d.kind  # noqa: E731  signedness is not a semantic kind here
    assert kind(tf_value.dtype) == kind(jax_value.dtype), f"{path}: dtype {tf_value.dtype} vs {jax_value.dtype}"
    if values:
        if tf_value.dtype.kind in "fc":
            np.testing.assert_allclose(jax_value, tf_value, rtol=RTOL, atol=ATOL, err_msg=path)
        else:
            np.testing.assert_array_equal(jax_value, tf_value, err_msg=path)


@pytest.mark.parametrize("case", NUMERIC, ids=[c["id"] for c in NUMERIC])
def test_numeric(case: dict):
    rng = np.random.default_rng(_seed(case["id"]))
    inputs = {name: make_input(spec, rng) for name, spec in case["inputs"].items()}
    prelude = case.get("prelude", "")
    tf_ns = {"tf": tf, "keras": keras, "ops": ops, "np": np, **inputs}
    jax_ns = {
        **SUPPORT, "functools": functools,
        "jax": jax, "jnp": jnp, "nn": nn, "optax": optax, "np": np,
        **{k: jnp.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()},
    }
    if "_TERN_" in case["after"]:  # a value table the translation generates (keras.regularizers.get)
        out = _translate(case)
        for node in ast.parse(out).body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id.startswith("_TERN_") for t in node.targets):
                exec(ast.get_source_segment(out, node), jax_ns)  # noqa: S102
    tf_value = normalize(_evaluate(case["before"], prelude, tf_ns))
    jax_value = normalize(_evaluate(case["after"], prelude, jax_ns))
    compare(tf_value, jax_value, values=not case.get("random"))
