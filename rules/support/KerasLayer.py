"""One layer of a translated Keras model, as ``model.layers`` and ``model.get_layer(name)`` give it.

A functional Keras model's layers keep their ``name=`` as Flax names (rules/structure/
functional_model.py), so a named layer is the subtree of that name at the top of the
model's variables (of a sub-model's subtree, ``within``, for ``model.encoder.get_layer``).
A Keras Sequential becomes an ``nn.Sequential`` of the same layers, which names its i-th
element ``layers_i``: ``listed`` gives Keras' ``model.layers``, layers without variables
included. The view reads and sets ``trainable`` through the model's ``KerasTrainable``
table; in tests, which hold the variables, it also gives the layer's weights as
``KerasVariable`` objects that stay the model's current values and whose ``assign`` writes
the model's variables (``weights`` in Keras' order, ``trainable_weights``, a weight by its
Keras name, ``layer.kernel``; ``get_weights()`` copies them). Package code holds no
variables: there the view only names the layer and sets its flag. A Flax auto name
(``Dense_0``, ``layers_0``) is not the name Keras gave the layer (``dense``), so reading it
is refused.
Translations import it from the package's generated support module.
"""

import flax.linen
import jax
import numpy

from .KerasTrainable import KerasTrainable
from .KerasVariable import KerasVariable
from .keras_weight_order import keras_weight_order


class KerasLayer:
    """A view of one layer of ``module`` (``model.get_layer(name)``, an element of ``model.layers``)."""

    def __init__(self, module, name, variables=None, order=None, layout="keras", keras_names=None, within=(),
                 set_variables=None, named=True):
        """``variables``: a function returning the model's current variables (tests), or None (package code);
        ``set_variables``: a function replacing them (``assign``). ``within``: the Flax path of the sub-model
        holding the layer; ``named``: whether ``name`` is the name Keras gave the layer."""
        self.module = module
        self.path = (*within, name)
        self._variables = variables
        self._set_variables = set_variables
        self._order = order
        self._layout = layout
        self._keras_names = dict(keras_names or {})
        self._named = named

    @staticmethod
    def names(module, variables=None, within=()):
        """The model's top-level layers that hold variables (the sub-model's at ``within``), in creation order."""
        if variables is None and within:
            raise NotImplementedError("a sub-model's layers are known from the model's variables, which tests hold")
        if variables is None:
            specs = getattr(module, "tern_input_specs", None)
            if specs is None:
                raise NotImplementedError(
                    f"{type(module).__name__} has no Input specs: its layers are known once it is built (call it first)")

            def example(spec):
                shape, dtype = spec
                return jax.numpy.zeros((1, *[1 if d is None else d for d in shape]), dtype)

            args = [[example(s) for s in specs]] if isinstance(specs, list) else [example(specs)]
            keys = {n: jax.random.key(0) for n in ("params", "dropout", "noise")}
            variables = jax.eval_shape(lambda: module.init(keys, *args))
        names = {}
        for collection, tree in variables.items():
            if collection != "losses":
                for key in within:
                    tree = tree.get(key, {})
                names.update(dict.fromkeys(tree))
        return list(names)

    @classmethod
    def get(cls, module, name, variables=None, within=(), **kwargs):
        """Keras' ``model.get_layer(name)`` (ValueError for a name no layer with variables has)."""
        held = variables() if variables is not None else None
        known = cls.names(module, held, within)
        if name not in known:
            raise ValueError(f"No such layer: {name}. Existing layers with variables are: {known}.")
        return cls(module, name, variables, within=within, **kwargs)

    @classmethod
    def listed(cls, module, **kwargs):
        """Keras' ``model.layers`` of a Keras Sequential (an ``nn.Sequential`` here): one view per layer,
        those without variables too, so that Keras' index i is element i."""
        if not isinstance(module, flax.linen.Sequential):
            raise NotImplementedError(
                f"model.layers of a {type(module).__name__}: only a Keras Sequential's list (an nn.Sequential's) "
                "is the layers in Keras' order")
        return [cls(module, f"layers_{i}", named=False, **kwargs) for i in range(len(module.layers))]

    @classmethod
    def all(cls, module):
        """Keras' ``model.layers``, for the layers that hold variables (freezing any other changes nothing)."""
        return [cls(module, name) for name in cls.names(module)]

    @property
    def name(self):
        if not self._named:
            raise NotImplementedError(
                f"{self.path[-1]!r} is where the nn.Sequential keeps the layer, not the name Keras gives it "
                "(its name= or an automatic dense, dense_1, ...)")
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

    def _paths(self):
        """Paths of the layer's variables in Keras' order (the collection first)."""
        if self._variables is None:
            raise NotImplementedError("the layer's weights live in a train state here, not on the model: read them there")
        if self._layout == "split":
            raise NotImplementedError("the layer's Keras variables are split into several Flax arrays (e.g. per gate)")
        order = self._order or keras_weight_order(self._variables())
        return [tuple(path) for path in order
                if path[0] != "losses" and tuple(path[1:1 + len(self.path)]) == self.path]

    def _read(self, path):
        value = self._variables()
        for key in path:
            value = value[key]
        return value

    def _write(self, path, value):
        self._keras_layout("assign")
        if self._set_variables is None:
            raise NotImplementedError("this view of the layer cannot write the model's variables")

        def replaced(node, keys):
            return value if not keys else {**node, keys[0]: replaced(node[keys[0]], keys[1:])}

        self._set_variables(replaced(self._variables(), path))

    def _variable(self, path):
        return KerasVariable(lambda: self._read(path), lambda value: self._write(path, value))

    def _trainable(self, path):
        return path[0] == "params" and KerasTrainable.of(self.module).variable(path[1:], self.path)

    @property
    def weights(self):
        return [self._variable(path) for path in self._paths()]

    variables = weights

    @property
    def trainable_weights(self):
        return [self._variable(path) for path in self._paths() if self._trainable(path)]

    trainable_variables = trainable_weights

    @property
    def non_trainable_weights(self):
        return [self._variable(path) for path in self._paths() if not self._trainable(path)]

    non_trainable_variables = non_trainable_weights

    def _keras_layout(self, what):
        if self._layout != "keras":
            raise NotImplementedError(
                f"{what}: the layer's Keras variables are not the Flax arrays as they are (reshaped or split)")

    def get_weights(self):
        self._keras_layout("get_weights()")
        return [numpy.asarray(self._read(path)) for path in self._paths()]

    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        self._keras_layout(f"layer.{attr}")
        leaf = self._keras_names.get(attr, attr)
        found = [path for path in self._paths() if path[-1] == leaf]
        if len(found) != 1:
            raise AttributeError(f"layer {self.path[-1]!r} has {len(found)} variables named {leaf!r}, not one")
        return self._variable(found[0])
