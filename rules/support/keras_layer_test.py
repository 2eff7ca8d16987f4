"""Keras' shared layer-test harness (``testing_utils.layer_test``), for a Flax module.

What Keras' harness checks that a Flax module has, checked the same way: the module built
from ``kwargs``; an output for an input of ``input_shape``/``input_dtype`` (Keras' random
data: uniform in [0, 10), minus 0.5 for floats; an unknown (None) dimension is 2 here where
Keras draws 1 to 3, so a size-1 dimension cannot hide a wrong broadcast); the output dtype
(``expected_output_dtype``, by default the input's); the output shape against
``expected_output_shape``, where Keras checks its symbolic output (the batch and every None
input dimension unknown): here the same static shape comes from ``jax.eval_shape`` with
symbolic dimensions, so an expected int where Keras infers None fails as it does;
``expected_output`` compared with Keras' tolerances (``assertAllClose`` when the test hands
itself over as ``test_harness``, else rtol=1e-3, atol=1e-6); the config round trip (Keras
rebuilds the layer from ``get_config()`` and sets the same weights: a Flax module is a
dataclass, so ``module.clone()`` applied to the same variables must give the same output);
and training (Keras runs one ``train_on_batch`` with the MSE to its own output: here the
gradient of that loss in training mode, which must be finite).

Not checked, with the reason: ``get_weights``/``set_weights`` (the variables are the
explicit tree ``init`` returned; nothing to round-trip), use in a functional model and as
the first layer of a Sequential (a Flax module has no symbolic graph: such a model is the
same ``apply``), ``compute_output_shape``/``compute_output_signature`` (Keras' static shape
inference, which the symbolic ``eval_shape`` above stands for). ``adapt_data`` and
``supports_masking`` have no Flax counterpart and are refused where the call is translated.
Returns the output as a NumPy array, as Keras' harness does.
"""

import inspect

import jax
import numpy

_CONCRETE = 2


def _keras_input_data(input_shape, input_dtype):
    shape = [_CONCRETE if d is None else d for d in input_shape]
    data = 10 * numpy.random.default_rng(0).random(shape)
    if numpy.dtype(input_dtype).kind == "f":
        data -= 0.5
    return data.astype(input_dtype)


def _keras_static_shape(layer, variables, input_shape, input_dtype, call_kwargs):
    """The output shape Keras infers for an Input of ``input_shape[1:]``: unknown dimensions as None."""
    names = ", ".join(f"d{i}" for i, d in enumerate(input_shape) if d is None or i == 0)
    symbols = iter(jax.export.symbolic_shape(names))
    shape = tuple(next(symbols) if d is None or i == 0 else d for i, d in enumerate(input_shape))
    spec = jax.ShapeDtypeStruct(shape, numpy.dtype(input_dtype))
    rngs = {name: jax.random.key(i) for i, name in enumerate(("params", "dropout", "noise"))}
    out = jax.eval_shape(lambda x: layer.apply(variables, x, rngs=rngs, **call_kwargs), spec)
    return tuple(d if isinstance(d, int) else None for d in out.shape)


def keras_layer_test(layer_cls, kwargs=None, input_shape=None, input_dtype=None, input_data=None,
                     expected_output=None, expected_output_dtype=None, expected_output_shape=None,
                     validate_training=True, custom_objects=None, test_harness=None):
    if input_data is None:
        if input_shape is None:
            raise ValueError("input_shape is None")
        input_dtype = input_dtype or "float32"
        input_data = _keras_input_data(input_shape, input_dtype)
    elif input_shape is None:
        input_shape = input_data.shape
    input_dtype = numpy.dtype(input_dtype if input_dtype is not None else input_data.dtype)
    if input_dtype.itemsize == 8 and not jax.config.jax_enable_x64:
        raise ValueError(f"input dtype {input_dtype}: JAX is 32-bit unless jax_enable_x64 is on")
    expected_output_dtype = numpy.dtype(expected_output_dtype if expected_output_dtype is not None else input_dtype)
    if test_harness is not None:
        tolerances = {"rtol": 1e-6, "atol": 1e-6}  # test_harness.assertAllClose
    else:
        tolerances = {"rtol": 1e-3, "atol": 1e-6}  # Keras' numeric_test

    layer = layer_cls(**(kwargs or {}))
    rngs = {name: jax.random.key(i) for i, name in enumerate(("params", "dropout", "noise"))}
    x = jax.numpy.asarray(input_data)
    variables = layer.init(rngs, x)
    call_kwargs = {}
    if "training" in inspect.signature(type(layer).__call__).parameters:
        call_kwargs["training"] = False  # Keras' predict
    actual, _ = layer.apply(variables, x, rngs=rngs, mutable=True, **call_kwargs)
    if numpy.dtype(actual.dtype) != expected_output_dtype:
        raise AssertionError(f"When testing layer {layer_cls.__name__}, found output dtype={actual.dtype} "
                             f"but expected to find {expected_output_dtype}.\nFull kwargs: {kwargs}")
    if expected_output_shape is not None:
        static = _keras_static_shape(layer, variables, input_shape, input_dtype, call_kwargs)
        for shape in (static, tuple(actual.shape)):
            if len(shape) != len(expected_output_shape) or any(
                    e is not None and e != a for e, a in zip(expected_output_shape, shape)):
                raise AssertionError(f"When testing layer {layer_cls.__name__}, found output_shape={shape} "
                                     f"but expected to find {tuple(expected_output_shape)}.\nFull kwargs: {kwargs}")
    actual = numpy.asarray(actual)
    if expected_output is not None:
        numpy.testing.assert_allclose(actual, expected_output, **tolerances)

    recovered, _ = layer.clone().apply(variables, x, rngs=rngs, mutable=True, **call_kwargs)
    numpy.testing.assert_allclose(numpy.asarray(recovered), actual, **tolerances)

    params = variables.get("params", {})
    if validate_training and jax.tree_util.tree_leaves(params) and numpy.issubdtype(actual.dtype, numpy.inexact):
        train_kwargs = {"training": True} if call_kwargs else {}

        def loss(p):
            out, _ = layer.apply({**variables, "params": p}, x, rngs=rngs, mutable=True, **train_kwargs)
            return jax.numpy.mean((out - actual) ** 2)

        grads = jax.grad(loss)(params)
        if not all(bool(numpy.all(numpy.isfinite(g))) for g in jax.tree_util.tree_leaves(grads)):
            raise AssertionError(f"When testing layer {layer_cls.__name__}, training gave a non-finite gradient")
    return actual
