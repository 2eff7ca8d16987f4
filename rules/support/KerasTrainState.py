"""What a Keras model and its optimizer hold between steps, as one pytree for pure JAX steps.

A Keras training step mutates the model's variables and the optimizer's slots in place;
a translated step takes this state and returns the next one. It is flax's ``TrainState``
(``step``, ``params``, the optax ``tx`` and its ``opt_state``; ``step`` is Keras'
``optimizer.iterations``) plus what a Keras model holds besides its trainable weights:

- ``model_state``: the Flax collections other than ``params`` (BatchNormalization's moving
  statistics live in ``batch_stats``), updated by every training forward pass;
- ``rng``: the key dropout and noise layers draw from. Step ``n`` uses
  ``fold_in(rng, n)``, so a step is reproducible from the state alone. Keras draws from
  its global seed generator instead: masks differ between TF and JAX, equal rates.
  A ``tf.random`` draw in a step or in a function given the state draws from
  ``draw_key(site)``: that step's key folded with the draw's place in the source.

Translations import it from the package's generated support module.
"""

import inspect

import flax.linen
import flax.struct
import flax.training.train_state
import jax


class KerasTrainState(flax.training.train_state.TrainState):
    """flax's TrainState plus the model's non-trainable collections and its dropout key."""

    model_state: dict = flax.struct.field(default_factory=dict)
    rng: jax.Array = None
    #: paths of the params Keras does not train (layers frozen with ``layer.trainable = False``)
    frozen: frozenset = flax.struct.field(pytree_node=False, default=frozenset())

    @classmethod
    def from_variables(cls, apply_fn, variables, tx, seed=0, frozen=frozenset()):
        """The state of a model whose variables are ``variables`` (all collections), before any step."""
        variables = dict(variables)
        params = variables.pop("params", {})
        return cls.create(apply_fn=apply_fn, params=params, tx=tx, model_state=variables, rng=jax.random.key(seed),
                          frozen=frozenset(frozen))

    @classmethod
    def of_module(cls, module, variables, tx, seed=0):
        """``from_variables`` for ``module``; params of layers frozen with ``layer.trainable = False``
        (the module's KerasTrainable table) get no update from ``tx``, as Keras' optimizer never sees them."""
        table = module.__dict__.get("_keras_trainable")
        if table is None:
            return cls.from_variables(module.apply, variables, tx, seed=seed)
        frozen = table.frozen(variables.get("params", {}))
        return cls.from_variables(module.apply, variables, table.optimizer(tx, variables), seed=seed, frozen=frozen)

    @property
    def module(self):
        """The Flax module this state applies: the object Keras code held as the model."""
        module = getattr(self.apply_fn, "__self__", None)
        if module is None:
            raise TypeError("this state's apply_fn is not a module's bound apply: build it with of_module")
        return module

    def with_optimizer(self, tx):
        """These variables under a new optimizer ``tx``, before its first update: Keras'
        ``optimizer.build(model.trainable_variables)`` for an optimizer made next to the
        model. Layers frozen by then are left out of ``tx`` (``of_module``); the key is kept."""
        return type(self).of_module(self.module, self.variables(), tx).replace(rng=self.rng)

    def variables(self, params=None):
        """All collections, with ``params`` in place of the state's own (to differentiate them)."""
        return {"params": self.params if params is None else params, **self.model_state}

    def apply_model(self, params, *args, **kwargs):
        """The model's output and its updated collections, as a training forward pass returns them.

        Dropout and noise layers draw from this step's key; the collections Keras updates in
        place (moving statistics) come back as the second value, for ``apply_gradients``.
        """
        kwargs = self.keras_call_kwargs(kwargs)
        if self.frozen:  # Keras differentiates the trainable variables only: frozen ones get a zero gradient
            params = jax.tree_util.tree_map_with_path(
                lambda path, p: jax.lax.stop_gradient(p) if tuple(k.key for k in path) in self.frozen else p, params)
        key = jax.random.fold_in(self.rng, self.step)
        rngs = {name: jax.random.fold_in(key, i) for i, name in enumerate(("dropout", "noise"))}
        if not self.model_state:
            return self.apply_fn(self.variables(params), *args, rngs=rngs, **kwargs), self.model_state
        out, updates = self.apply_fn(self.variables(params), *args, rngs=rngs, mutable=list(self.model_state), **kwargs)
        return out, {**self.model_state, **updates}

    def predict(self, *args, **kwargs):
        """The model's output with the current variables, nothing updated (Keras' inference call).

        A training-mode call (``training=True``) draws dropout and noise from this step's key,
        as ``apply_model`` does; a model with collections Keras updates in such a call
        (moving statistics) is refused, since nothing here would keep the updates.
        """
        if kwargs.get("training") is not True:
            return self.apply_fn(self.variables(), *args, **self.keras_call_kwargs(kwargs))
        kept = sorted(c for c in self.model_state if c != "losses")  # a pass's loss terms are recomputed, not kept
        if kept:
            raise NotImplementedError(
                f"a training call of a model with {kept} outside its train step's loss function: "
                "Keras updates those in place, and this call would drop the updates")
        out, _ = self.apply_model(self.params, *args, **kwargs)
        return out

    def draw_key(self, site):
        """The key of one ``tf.random`` draw at ``site`` (its function and place in the source) in this step.

        Keras draws from a global seed generator that advances with every draw; here a draw is
        a function of the state: ``fold_in(fold_in(rng, step), hash(site))`` (32-bit FNV-1a of
        the site's name), different for every step and every draw site, the same when a step is rerun.
        """
        digest = 2166136261
        for byte in site.encode():
            digest = ((digest ^ byte) * 16777619) & 0xFFFFFFFF
        return jax.random.fold_in(jax.random.fold_in(self.rng, self.step), digest)

    def keras_call_kwargs(self, kwargs):
        """``kwargs`` without ``training`` if the model's call takes no such argument.

        Keras passes ``training`` to every model; a Flax module without it (an
        ``nn.Sequential`` of layers with no dropout or normalization) computes the same in
        both modes, so dropping it is exact.
        """
        module = getattr(self.apply_fn, "__self__", None)
        while isinstance(module, flax.linen.Sequential) and module.layers:
            module = module.layers[0]  # nn.Sequential hands its arguments to the first layer
        if "training" not in kwargs or module is None or not callable(module):
            return kwargs
        params = inspect.signature(type(module).__call__).parameters
        if "training" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return kwargs
        return {k: v for k, v in kwargs.items() if k != "training"}
