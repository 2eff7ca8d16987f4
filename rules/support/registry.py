"""The tests' layer registry: Keras layers own their variables, Flax modules do not.

A Keras layer builds its variables on its first call and keeps them; a translated test
calls ``_tern_apply(module, x)``, which keeps each module's variables here, by the module
object, with their creation order (Keras' weight order). Everything a test reads of a
layer (``model.trainable_variables``, ``get_weights()``, ``get_layer(name)``) reads the
registry. Translated tests import these helpers from the package's generated support
module.
"""

import dataclasses

import flax.linen
import jax
import numpy

from .KerasLayer import KerasLayer
from .keras_weight_order import keras_weight_order


_TERN_VARIABLES = {}
_TERN_ORDER = {}
_TERN_KEYS = [0]


def _tern_rngs():
    """Fresh PRNG keys for every stream the translated modules use."""
    _TERN_KEYS[0] += 1
    key = jax.random.key(_TERN_KEYS[0])
    return {name: jax.random.fold_in(key, i) for i, name in enumerate(("params", "dropout", "noise"))}


def _tern_init(module, *args, **kwargs):
    """Build a module as Keras builds a layer; remember its variables' creation order (Keras' weight order)."""
    variables = module.init(_tern_rngs(), *args, **kwargs)
    _TERN_VARIABLES[id(module)] = (module, variables)
    # a pass's regularization terms ("losses") are no weights
    _TERN_ORDER[id(module)] = keras_weight_order({c: tree for c, tree in variables.items() if c != "losses"})
    return variables


def _tern_apply(module, *args, method=None, **kwargs):
    """Call a Flax module as Keras calls a layer: build on first use, keep state updates."""
    entry = _TERN_VARIABLES.get(id(module))
    if entry is None:
        entry = (module, _tern_init(module, *args, method=method, **kwargs))
    out, updates = module.apply(entry[1], *args, method=method, rngs=_tern_rngs(), mutable=True, **kwargs)
    _TERN_VARIABLES[id(module)] = (module, {**entry[1], **updates})
    return out


def _tern_variables(module, collection=None):
    """The variables Keras would hold on the layer (all, or one collection)."""
    specs = getattr(module, "tern_input_specs", None)
    if id(module) not in _TERN_VARIABLES and specs is not None:
        # a functional Keras model is built from its Inputs at construction
        def example(spec):
            shape, dtype = spec
            return jax.numpy.zeros((1, *[1 if d is None else d for d in shape]), dtype)
        args = [[example(s) for s in specs]] if isinstance(specs, list) else [example(specs)]
        _tern_init(module, *args)
    variables = _TERN_VARIABLES[id(module)][1]
    return variables if collection is None else variables.get(collection, {})


def _tern_leaves(module, collection=None):
    """All the module's weights, its trainable ones ("params") or the others ("batch_stats"), in Keras'
    order (layer by layer as created: ``_TERN_ORDER``); params of layers frozen with
    ``layer.trainable = False`` (its KerasTrainable table) count as the others."""
    variables = _tern_variables(module)
    table = module.__dict__.get("_keras_trainable")

    def trainable(path):
        return path[0] == "params" and (table is None or table.variable(tuple(path[1:])))

    order = _TERN_ORDER.get(id(module)) or [tuple(k.key for k in path)
                                            for path, _ in jax.tree_util.tree_leaves_with_path(variables)]
    paths = [p for p in order if p[0] != "losses"]  # a pass's regularization terms, not weights
    if collection == "params":
        paths = [p for p in paths if trainable(p)]
    elif collection == "batch_stats":
        paths = [p for p in paths if not trainable(p)]
    elif collection is not None:
        paths = [p for p in paths if p[0] == collection]
    out = []
    for path in paths:
        value = variables
        for key in path:
            value = value[key]
        out.append(value)
    return out


def _tern_set_variables(module, variables):
    """Replace the module's variables in the registry (``assign`` on a layer's weight)."""
    _TERN_VARIABLES[id(module)] = (module, variables)


def _tern_built(module, spec):
    """A Keras model declared with ``keras.Input`` is built at construction: build it now."""
    shape, dtype = spec
    _tern_init(module, jax.numpy.zeros((1, *[1 if d is None else d for d in shape]), dtype))
    return module


def _tern_keras_weights(module):
    """``model.get_weights()``: NumPy arrays in Keras' order (layer by layer as created,
    trainable weights before the layer's moving statistics)."""
    variables = _tern_variables(module)
    out = []
    for path in _TERN_ORDER[id(module)]:
        value = variables
        for key in path:
            value = value[key]
        out.append(numpy.asarray(value))
    return out


def _tern_submodels(module):
    """Keras builds a sub-model declared with Inputs at construction: before a model's first call, its
    variables are those of the sub-models it was given (its Flax fields), each under its field's name."""
    variables, order = {}, []
    for field in dataclasses.fields(module):
        part = getattr(module, field.name)
        parts = part if isinstance(part, (list, tuple)) else [part]
        if field.name in ("parent", "name") or not any(isinstance(p, flax.linen.Module) for p in parts):
            continue
        if not isinstance(part, flax.linen.Module) or getattr(part, "tern_input_specs", None) is None:
            raise NotImplementedError(f"{field.name!r} has no variables before the model's first call: call the model first")
        for collection, tree in _tern_variables(part).items():
            variables.setdefault(collection, {})[field.name] = tree
        order += [(path[0], field.name, *path[1:]) for path in _TERN_ORDER[id(part)]]
    _TERN_VARIABLES[id(module)] = (module, variables)
    _TERN_ORDER[id(module)] = order


def _tern_layer(module, name, layout="keras", within=()):
    """``model.get_layer(name)`` (``within``: ``model.<within>.get_layer(name)``, a sub-model's layer): a view
    of that layer's variables in the registry, whose weights' ``assign`` writes there."""
    if within and id(module) not in _TERN_VARIABLES and getattr(module, "tern_input_specs", None) is None:
        _tern_submodels(module)
    _tern_variables(module)  # a functional Keras model is built from its Inputs at construction
    return KerasLayer.get(module, name, variables=lambda: _tern_variables(module),
                          order=_TERN_ORDER.get(id(module)), layout=layout, within=within,
                          set_variables=lambda variables: _tern_set_variables(module, variables))


def _tern_layers(module, layout="keras"):
    """``model.layers`` of a Keras Sequential: a view of each layer, in Keras' order (``KerasLayer.listed``)."""
    return KerasLayer.listed(module, variables=lambda: _tern_variables(module), layout=layout,
                             set_variables=lambda variables: _tern_set_variables(module, variables))
