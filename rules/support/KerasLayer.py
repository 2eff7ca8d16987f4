"""One layer of a translated Keras model, as ``model.layers`` and ``model.get_layer(name)`` give it.

A functional Keras model's layers keep their ``name=`` as Flax names (rules/structure/
functional_model.py), so a named layer is the subtree of that name at the top of the
model's variables. The view reads and sets ``trainable`` through the model's
``KerasTrainable`` table; in tests, which hold the variables, it also reads the layer's
weights (``weights`` in Keras' order, ``trainable_weights``, ``get_weights()``, and a
weight by its Keras name, ``layer.kernel``). Package code holds no variables: there the
view only names the layer and sets its flag. A Flax auto name (``Dense_0``) is not the
name Keras gave the layer (``dense``), so reading it is refused.
Translations insert this definition into the output file; the imports are not copied.
"""

import jax
import jax.numpy as jnp
import numpy as np


class KerasLayer:
    """``model.get_layer(name)``: a view of the layer ``name`` of ``module``."""

    def __init__(self, module, name, variables=None, order=None, layout="keras", keras_names=None):
        """``variables``: a function returning the model's current variables (tests), or None (package code)."""
        self.module = module
        self.path = (name,)
        self._variables = variables
        self._order = order
        self._layout = layout
        self._keras_names = dict(keras_names or {})

    @staticmethod
    def names(module, variables=None):
        """The model's top-level layers that hold variables, in creation order (from ``init``'s tree)."""
        if variables is None:
            specs = getattr(module, "tern_input_specs", None)
            if specs is None:
                raise NotImplementedError(
                    f"{type(module).__name__} has no Input specs: its layers are known once it is built (call it first)")

            def example(spec):
                shape, dtype = spec
                return jnp.zeros((1, *[1 if d is None else d for d in shape]), dtype)

            args = [[example(s) for s in specs]] if isinstance(specs, list) else [example(specs)]
            keys = {n: jax.random.key(0) for n in ("params", "dropout", "noise")}
            variables = jax.eval_shape(lambda: module.init(keys, *args))
        names = {}
        for collection, tree in variables.items():
            if collection != "losses":
                names.update(dict.fromkeys(tree))
        return list(names)

    @classmethod
    def get(cls, module, name, variables=None, **kwargs):
        """Keras' ``model.get_layer(name)`` (ValueError for a name no layer with variables has)."""
        held = variables() if variables is not None else None
        known = cls.names(module, held)
        if name not in known:
            raise ValueError(f"No such layer: {name}. Existing layers with variables are: {known}.")
        return cls(module, name, variables, **kwargs)

    @classmethod
    def all(cls, module):
        """Keras' ``model.layers``, for the layers that hold variables (freezing any other changes nothing)."""
        return [cls(module, name) for name in cls.names(module)]

    @property
    def name(self):
        prefix, _, count = self.path[-1].rpartition("_")
        if prefix[:1].isupper() and count.isdigit():  # Flax's auto name, ``{class name}_{n}``
            raise NotImplementedError(
                f"Flax auto-named this layer {self.path[-1]!r}, which is not the name Keras gives it: "
                "give the Keras layer an explicit name=")
        return self.path[-1]

    @property
    def trainable(self):
        return KerasTrainable.of(self.module).get(self.path)

    @trainable.setter
    def trainable(self, value):
        KerasTrainable.of(self.module).set(self.path, value)

    # -- weights (tests) -------------------------------------------------------------

    def _leaves(self):
        """``(path, value)`` of the layer's variables in Keras' order (paths with the collection first)."""
        if self._variables is None:
            raise NotImplementedError("the layer's weights live in a train state here, not on the model: read them there")
        if self._layout == "split":
            raise NotImplementedError("the layer's Keras variables are split into several Flax arrays (e.g. per gate)")
        variables = self._variables()
        order = self._order or keras_weight_order(variables)
        out = []
        for path in order:
            if path[0] == "losses" or tuple(path[1:1 + len(self.path)]) != self.path:
                continue
            value = variables
            for key in path:
                value = value[key]
            out.append((tuple(path), value))
        return out

    def _trainable(self, path):
        return path[0] == "params" and KerasTrainable.of(self.module).variable(path[1:], self.path)

    @property
    def weights(self):
        return [value for _, value in self._leaves()]

    variables = weights

    @property
    def trainable_weights(self):
        return [value for path, value in self._leaves() if self._trainable(path)]

    trainable_variables = trainable_weights

    @property
    def non_trainable_weights(self):
        return [value for path, value in self._leaves() if not self._trainable(path)]

    non_trainable_variables = non_trainable_weights

    def _keras_layout(self, what):
        if self._layout != "keras":
            raise NotImplementedError(
                f"{what}: the layer's Keras variables are not the Flax arrays as they are (reshaped or split)")

    def get_weights(self):
        self._keras_layout("get_weights()")
        return [np.asarray(value) for value in self.weights]

    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        self._keras_layout(f"layer.{attr}")
        leaf = self._keras_names.get(attr, attr)
        found = [value for path, value in self._leaves() if path[-1] == leaf]
        if len(found) != 1:
            raise AttributeError(f"layer {self.path[-1]!r} has {len(found)} variables named {leaf!r}, not one")
        return found[0]
