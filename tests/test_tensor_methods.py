"""The TF-only member table (rules/structure/tensor_methods.toml) and the rule that applies it.

* the table against the installed libraries: every member exists on each TF class it names,
  as the kind it names (a property is an attribute, a function a method); every dotted target
  in a template resolves; the fields are consistent (a rewrite of a method takes no arguments,
  a rewrite narrower than where the name is TF's has a TODO for the rest, rewrites explain
  themselves in ``note``);
* behaviour: for each rewrite, the original on real TF values (tensors and variables of several
  dtypes and shapes) against its translation, made by tern, on the equivalent JAX arrays:
  structure first (kind of value, length), then values, exactly (these are conversions, not
  arithmetic: rtol = atol = 0). The translation run on the TF value itself gives the same
  answer, or raises (a dtype rewrite reads JAX/NumPy dtypes; NumPy cannot take a TF bfloat16
  scalar): never another value;
* a corpus in the style of public Keras layer libraries, translated: every use of a table
  member left in the output stands on a statement directly under a ``# TODO(tern)`` naming it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import math
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework.ops import EagerTensor, SymbolicTensor

from tern.engine.translate import todos_in, translate_source
from tern_rules.structure.tensor_methods import RECEIVERS, Member, members

RECORDS = sorted(members().values(), key=lambda r: r.name)
REWRITES = [r for r in RECORDS if r.template is not None]
TF_CLASSES = {
    "Tensor": (tf.Tensor, EagerTensor, SymbolicTensor),
    "TensorShape": (tf.TensorShape,),
    "DType": (tf.DType,),
    "Variable": (tf.Variable, type(tf.Variable(0.0))),
    "RaggedTensor": (tf.RaggedTensor,),
    "SparseTensor": (tf.SparseTensor,),
}
TARGET_ROOTS = ("numpy", "jax", "math")


# -- the table against the installed libraries ---------------------------------------------------

def _kind(cls, name: str) -> str | None:
    """How ``cls`` has ``name``: "attribute" (a property or a value), "method", or None."""
    for klass in cls.__mro__:
        if name in vars(klass):
            value = inspect.getattr_static(cls, name)
            if isinstance(value, property) or not callable(value):
                return "attribute"
            return "method"
    return None


@pytest.mark.parametrize("record", RECORDS, ids=[r.name for r in RECORDS])
def test_member_exists_on_each_class_it_names(record: Member):
    assert record.on and set(record.on) <= set(TF_CLASSES), record.on
    for on in record.on:
        kinds = {_kind(cls, record.name) for cls in TF_CLASSES[on]} - {None}
        assert kinds, f"tf.{on} has no {record.name!r}"
        assert kinds == {record.kind}, f"tf.{on}.{record.name} is a {kinds}, the table says {record.kind}"


@pytest.mark.parametrize("record", RECORDS, ids=[r.name for r in RECORDS])
def test_record_is_consistent(record: Member):
    assert record.kind in ("method", "attribute")
    assert record.receiver in RECEIVERS and (record.template_receiver or "any") in RECEIVERS
    assert record.call in ("any", "no-args", "positional")
    assert record.files in ("tf", "any")
    assert record.template is not None or record.todo, "a rewrite or a TODO reason"
    assert ":" not in record.construct, "a TODO's construct ends at its first colon (tern.engine.translate.todos_in)"
    if record.kind == "attribute":
        assert record.call == "any", "an attribute is not called"
    if record.template is not None:
        assert "{receiver}" in record.template
        assert record.kind == "attribute" or record.call == "no-args", "the template has no place for arguments"
        assert record.note, "a rewrite says why it is right"
        if (record.template_receiver or record.receiver) != record.receiver:
            assert record.todo, "uses the template does not reach need a TODO"
    else:
        assert record.template_receiver is None


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize("record", REWRITES, ids=[r.name for r in REWRITES])
def test_template_targets_exist(record: Member):
    tree = ast.parse(record.template.replace("{receiver}", "receiver"), mode="eval")
    names = {_dotted(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute)} - {None}
    targets = {n for n in names if n.split(".")[0] in TARGET_ROOTS}
    targets = {n for n in targets if not any(o != n and o.startswith(n + ".") for o in targets)}  # longest only
    for target in targets:
        assert _resolves(target), f"{target} does not exist"
    calls = {_dotted(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)} - {None}
    assert all(c.split(".")[0] in TARGET_ROOTS + ("list", "len") for c in calls), calls


# -- behaviour: original on TF values, translation on JAX arrays ------------------------------------

DTYPES = ("float16", "bfloat16", "float32", "int8", "int16", "int32", "uint8", "uint16", "uint32", "bool", "complex64")
SHAPES = ((), (3,), (2, 3), (2, 0, 4))
#: the receiver each class's members hang off, in the source
RECEIVER_OF = {"Tensor": "x", "Variable": "x", "TensorShape": "x.shape", "DType": "x.dtype"}


def _values():
    rng = np.random.default_rng(0)
    for dtype in DTYPES:
        for shape in SHAPES:
            data = (rng.standard_normal(shape) * 10).astype(jnp.dtype(dtype))
            yield f"{dtype}{list(shape)}", data


VALUES = list(_values())


def _functions(record: Member, on: str):
    """(original, translated) functions of ``x`` using the member, the second made by tern."""
    use = f"{RECEIVER_OF[on]}.{record.name}" + ("()" if record.kind == "method" else "")
    source = f"import tensorflow as tf\n\n\ndef f(x):\n    return {use}\n"
    translated = translate_source(source)
    assert not translated.todos and any(e.rule == "structure:tensor-methods" for e in translated.edits), translated.code
    original_ns, translated_ns = {"tf": tf}, {}
    exec(source, original_ns)
    exec(translated.code, translated_ns)
    return original_ns["f"], translated_ns["f"]


def _normal(value):
    """A value in comparable form, with its kind: dtypes by name, shapes and tuples as lists,
    NumPy scalars as 0-d arrays (their dtype kept)."""
    if isinstance(value, (tf.DType, np.dtype)):
        return "dtype", value.name
    if isinstance(value, tf.TensorShape):
        return "sequence", value.as_list()
    if isinstance(value, (tuple, list)):
        return "sequence", list(value)
    if isinstance(value, type):
        return "type", value
    if isinstance(value, bool):
        return "bool", value
    if isinstance(value, (int, float, complex)):
        return "number", value
    array = np.asarray(value)
    return "array", (array.dtype.name, array.shape, array)


def _same(a, b) -> None:
    kind_a, a = _normal(a)
    kind_b, b = _normal(b)
    assert kind_a == kind_b, (kind_a, kind_b)  # structure first
    if kind_a == "array":
        assert a[:2] == b[:2]
        np.testing.assert_array_equal(a[2], b[2])  # exact: rtol = atol = 0
    else:
        assert a == b


def _cases():
    for record in REWRITES:
        for on in record.on:
            if on in RECEIVER_OF:
                yield pytest.param(record, on, id=f"{on}.{record.name}")


@pytest.mark.parametrize("record,on", list(_cases()))
def test_rewrite_matches_tf(record: Member, on: str):
    original, translated = _functions(record, on)
    compared = 0
    for label, data in VALUES:
        tf_value = tf.Variable(data) if on == "Variable" else tf.constant(data)
        try:
            expected = original(tf_value)
        except (TypeError, ValueError):
            continue  # TF has no answer (bool.max, complex64.min): nothing to keep
        _same(expected, translated(jnp.asarray(data)))
        try:
            on_tf = translated(tf_value)
        except (TypeError, ValueError):
            # loud, not wrong: dtype rewrites read JAX/NumPy dtypes, and NumPy cannot take a TF bfloat16 scalar
            assert on == "DType" or "bfloat16[]" in label, label
        else:
            _same(expected, on_tf)
        compared += 1
    assert compared >= len(SHAPES) * 3, f"too few values compared ({compared})"


def test_dtype_rewrites_read_jax_scalar_types_and_strings():
    """``dtype`` parameters hold what callers pass: tern writes ``jnp.float32`` for ``tf.float32``."""
    records = members()
    namespace = {"jnp": jnp, "np": np, "numpy": np, "jax": __import__("jax")}
    for given, expected in ((jnp.float32, tf.float32), ("int8", tf.int8), (jnp.bfloat16, tf.bfloat16), (jnp.uint16, tf.uint16)):
        for name in ("as_numpy_dtype", "is_floating", "is_integer", "is_unsigned", "is_bool", "is_complex", "size", "max", "min"):
            template = records[name].template.replace("{receiver}", "d")
            got = eval(template, {**namespace, "d": given})
            want = getattr(expected, name)
            assert got == want or float(got) == float(want), (given, name, got, want)


# -- corpus: nothing TF-only is left silently -----------------------------------------------------

CORPUS = {
    "shape_utils.py": '''
        import tensorflow as tf


        def shape_list(tensor):
            """Static dimensions where known, dynamic ones elsewhere (as in transformers' TF utils)."""
            static = tensor.shape.as_list()
            dynamic = tf.shape(tensor)
            return [dynamic[i] if s is None else s for i, s in enumerate(static)]


        def flatten_tail(x):
            tail = x.get_shape()[1:].num_elements()
            return tf.reshape(x, [-1, tail])


        def merge_heads(x, num_heads):
            batch, length, _, depth = x.get_shape().as_list()
            if x.shape.ndims != 4:
                raise ValueError("expected rank 4")
            return tf.reshape(x, [-1, length, num_heads * depth])


        def check_static(x, expected):
            x.set_shape(expected)
            return x
        ''',
    "masking.py": '''
        import numpy as np
        import tensorflow as tf


        def mask_logits(logits, mask):
            mask = tf.cast(mask, logits.dtype)
            return logits * mask - (1.0 - mask) * logits.dtype.max


        def epsilon_for(dtype):
            return np.finfo(dtype.as_numpy_dtype).eps


        def to_float(x):
            is_float = x.dtype.base_dtype.is_floating
            return x if is_float else tf.cast(x, tf.float32)


        def value_range(x):
            low, high = x.dtype.limits
            return low, high
        ''',
    "layers.py": '''
        import tensorflow as tf


        class ExponentialMovingAverage(tf.keras.layers.Layer):
            """Tracks the running mean of its inputs (an EMA kept as a non-trainable weight)."""

            def __init__(self, decay=0.99, **kwargs):
                super().__init__(**kwargs)
                self.decay = decay

            def build(self, input_shape):
                self.average = self.add_weight(name="average", shape=(input_shape[-1],), initializer="zeros",
                                               trainable=False)

            def call(self, inputs, training=False):
                if training:
                    batch_mean = tf.reduce_mean(inputs, axis=0)
                    self.average.assign(self.decay * self.average + (1.0 - self.decay) * batch_mean)
                outputs = inputs - self.average
                outputs.set_shape(inputs.get_shape())
                return outputs


        class PositionEmbedding(tf.keras.layers.Layer):
            def __init__(self, max_length, **kwargs):
                super().__init__(**kwargs)
                self.max_length = max_length

            def build(self, input_shape):
                dims = input_shape.as_list()
                self.table = self.add_weight(name="table", shape=(self.max_length, dims[-1]))

            def call(self, inputs):
                length = inputs.shape.as_list()[1]
                return inputs + self.table[:length]
        ''',
    "optim.py": '''
        import tensorflow as tf


        def apply_ema(variables, averages, decay):
            for variable, average in zip(variables, averages):
                average.assign(decay * average + (1.0 - decay) * variable)


        def sparse_update(table, rows, values):
            table.scatter_nd_update(rows, values)
            table.scatter_add(tf.IndexedSlices(values, rows[:, 0]))
            return table.read_value()


        def bump(step):
            step.assign_add(1)
            return int(step.value())


        def snapshot(variable):
            return variable.numpy(), variable.initial_value
        ''',
    "ragged.py": '''
        import tensorflow as tf


        def pad_batch(tokens, max_length):
            lengths = tokens.row_lengths()
            dense = tokens.to_tensor(default_value=0, shape=[None, max_length])
            return dense, lengths


        def flat(tokens):
            return tokens.flat_values, tokens.nrows(), tokens.to_list()


        def densify(sparse):
            return tf.sparse.to_dense(sparse), sparse.dense_shape
        ''',
    "graph.py": '''
        import tensorflow as tf


        def describe(tensor):
            return tensor.op.name, tensor.graph, tensor.consumers()


        def cache(tensors):
            return {t.ref(): t for t in tensors}
        ''',
}


def _uses(tree: ast.Module):
    """(member, statement line) of every use of a table member, by its kind, off a receiver the
    record takes as TF's (``self``'s own members are the class's)."""
    records = members()
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        record = records.get(node.attr) if isinstance(node, ast.Attribute) else None
        if record is None or (record.kind == "method") != (id(node) in called):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if record.receiver != "any" and not _receiver_is(node.value, record.receiver):
            continue
        stmt = node
        while not isinstance(stmt, ast.stmt):
            stmt = parents[stmt]
        yield record, stmt.lineno


def _receiver_is(node: ast.AST, kind: str) -> bool:
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Call) and kind == "shape":
        return isinstance(node.func, ast.Attribute) and node.func.attr == "get_shape"
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name == kind or name.endswith("_" + kind)


def _silent(code: str) -> list[str]:
    todos = {(t.line, t.construct) for t in todos_in(code)}
    lines = code.splitlines()
    return [f"{line}: {lines[line - 1].strip()}" for record, line in _uses(ast.parse(code))
            if (line, record.construct) not in todos]


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_leaves_nothing_silent(name):
    source = textwrap.dedent(CORPUS[name]).lstrip()
    before = list(_uses(ast.parse(source)))
    assert len(before) >= 4, "the snippet exercises the table"
    code = translate_source(source).code
    assert _silent(code) == [], code


def test_corpus_rewrites_what_has_an_exact_form():
    code = translate_source(textwrap.dedent(CORPUS["shape_utils.py"]).lstrip()).code
    assert "list(tensor.shape)" in code and "math.prod(x.shape[1:])" in code and "len(x.shape) != 4" in code, code
    remaining = {record.name for record, _ in _uses(ast.parse(code))}
    assert remaining == {"set_shape"}, code


@pytest.mark.parametrize("header", ["if x.shape.is_fully_defined():", "while not x.shape.is_fully_defined():",
                                    "for d in x.shape.dims:", "with x.graph.as_default():"])
def test_a_todo_in_a_compound_statement_header_stands_on_that_statement(header):
    source = f"import tensorflow as tf\n\n\ndef f(x):\n    {header}\n        x = x + 1\n    return x\n"
    code = translate_source(source).code
    assert _silent(code) == []
    lines = code.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == header)
    assert "TODO(tern)" in lines[at - 1], code  # above the header, not above `x = x + 1`
    assert "TODO(tern)" not in lines[at + 1], code


def test_uses_math_prod_semantics():
    """``math.prod`` of an empty shape is 1, as TF's num_elements() of a scalar."""
    assert math.prod(()) == tf.TensorShape([]).num_elements() == 1
