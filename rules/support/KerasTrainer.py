"""Keras' ``compile`` / ``fit`` / ``evaluate`` / ``predict`` over a Flax module and its variables.

A Keras model is its own trainer: it keeps its variables, the compiled loss and metrics,
and the optimizer with its slots, so a function that compiles the model it is given acts
on the caller's object and a later ``model.fit`` elsewhere trains with that configuration.
A Flax module holds no state; the translation attaches one ``KerasTrainer`` to the module
object (``KerasTrainer.of(module)``), the object every caller shares, as Keras' callers
share the model. A copy (``module.clone()``) has none, like a model never compiled.

The steps are pure and jitted over a ``KerasTrainState`` (value_and_grad, then optax);
metrics are the NumPy support objects of rules/api/metrics.toml, updated outside jit.
Keras 3's semantics (keras/src/trainers/, TF backend), where they are deterministic:

- batches: ``KerasEpochIterator`` (arrays cut in order, last batch partial; datasets
  through ``as_numpy_iterator()``). ``shuffle=True`` draws each epoch's permutation from
  ``numpy.random.default_rng(seed)`` (``KerasTrainer.of(module, seed=0)``), where Keras
  draws from TF's generator: the order differs from Keras', reproducibly.
- the loss of a batch: the compiled loss (a Keras loss object translated through the
  tables, or a function of ``(y_true, y_pred)`` reduced as Keras' LossFunctionWrapper
  does with ``keras_loss``), in float32, times ``loss_weights``, plus the sum of every
  term of ``model.losses``: translated modules sow regularizer and ``add_loss`` terms into
  the ``losses`` collection during the pass (training and evaluation alike, as Keras
  computes them in both); it is not a weight (``get_weights`` leaves it out).
- the reported ``loss`` is the running mean of the batch losses weighted by the batch
  sizes (Keras' ``Mean`` tracker updated with ``sample_weight=batch size``), so
  ``evaluate`` reports the mean over samples even with a partial last batch. Metrics
  update with each batch's labels and the predictions of its training forward pass
  (before the update); ``weighted_metrics`` also get the sample weights.
- logs are Python floats sorted by name; ``evaluate`` returns the loss then the metrics
  in compile order (one value alone is returned as it is), or the dict; ``fit`` returns
  a ``KerasHistory``, adds ``val_``-prefixed logs every ``validation_freq`` epochs and
  calls callbacks (``KerasEarlyStopping``, ``KerasModelCheckpoint`` or any object with
  Keras' hooks) in the order given, the history last.
- variables are built from the first batch when the module has none yet (Keras builds
  from the Input shape; here from a process-wide sequence of keys); ``iterations`` is
  the optimizer's step count (Keras' ``optimizer.iterations``); compiling again with the
  same optax object keeps its state, a new one starts from zero, as a new Keras optimizer.
- ``verbose``, ``run_eagerly``, ``jit_compile`` and ``steps_per_execution`` are accepted
  and change nothing numeric (no progress bar; steps are always jitted, one batch each).
  Per-output losses and metrics (dicts, several outputs) and ``class_weight`` are not
  supported: they raise.
- a class whose Keras ``train_step`` / ``test_step`` override tern translated
  (rules/structure/keras_step_override.py) has ``train_step(state, data) -> (state, values)``
  and ``train_step_logs(**values) -> logs`` (``test_step`` likewise, without the state):
  ``fit`` (``evaluate``) jits the step, runs it on each batch packed as Keras packs it
  (``x``, ``(x, y)`` or ``(x, y, sample_weight)``; a dataset's elements as they are), and
  hands its values to the logs method on the module object, whose trackers persist.
  ``model.metrics`` (the class's property) is reset where Keras resets it (each epoch of
  ``fit``, the start of ``evaluate``); the epoch's logs are the trackers' results when
  their names are the step's log keys, else the last step's logs (Keras'
  ``_get_metrics_result_or_logs``). Each evaluation batch draws its noise from a key of
  its own (``apply_model`` folds the step count, which evaluation does not advance).

Translations import it from the package's generated support module.
"""

import functools

import jax
import numpy
import optax

from .KerasEpochIterator import KerasEpochIterator
from .KerasHistory import KerasHistory
from .KerasMean import KerasMean
from .KerasMeanMetricWrapper import KerasMeanMetricWrapper
from .KerasTrainState import KerasTrainState
from .keras_checkpoint_restore import keras_checkpoint_restore
from .keras_checkpoint_save import keras_checkpoint_save
from .keras_loss import keras_loss
from .keras_weight_order import keras_weight_order


class KerasTrainer:
    """A Flax module with what a Keras model keeps for training: variables, optimizer, loss, metrics."""

    #: Keras' ``metric._direction`` (read by EarlyStopping/ModelCheckpoint in mode "auto": KerasMonitor),
    #: by the translated metric's class, or the function a KerasMeanMetricWrapper averages
    DIRECTIONS = {
        "KerasAUC": "up", "KerasPrecision": "up", "KerasRecall": "up", "KerasAutoAccuracy": "up",
        "KerasRootMeanSquaredError": "down",
        "keras_accuracy": "up", "keras_binary_accuracy": "up", "keras_categorical_accuracy": "up",
        "keras_sparse_categorical_accuracy": "up", "keras_top_k_categorical_accuracy": "up",
        "keras_sparse_top_k_categorical_accuracy": "up",
        "keras_mean_squared_error": "down", "keras_mean_absolute_error": "down",
        "keras_mean_absolute_percentage_error": "down", "keras_mean_squared_logarithmic_error": "down",
        "keras_binary_crossentropy": "down", "keras_categorical_crossentropy": "down",
        "keras_sparse_categorical_crossentropy": "down", "keras_hinge": "down", "keras_squared_hinge": "down",
        "keras_categorical_hinge": "down", "keras_kl_divergence": "down", "keras_poisson": "down",
        "keras_log_cosh": "down", "keras_huber": "down", "keras_cosine_similarity": "down",
    }
    #: keys for modules built here, one per build, in process order
    _builds = [0]

    @classmethod
    def of(cls, module, seed=0):
        """The trainer attached to ``module`` (a new one, with ``seed``, on first use): what Keras keeps on the model object."""
        trainer = module.__dict__.get("_keras_trainer")
        if trainer is None:
            trainer = cls(module, seed=seed)
            object.__setattr__(module, "_keras_trainer", trainer)
        return trainer

    def __init__(self, module, seed=0):
        self.module = module
        self.seed = seed
        self.compiled = False
        self.stop_training = False
        self.history = None
        #: called with (variables, weight order) after every change of the variables
        self.on_update = None
        self._variables = None
        self._state = None
        self._order = None
        self._tx = None
        self._loss = None
        self._loss_weights = None
        self._metrics = []
        self._weighted_metrics = []
        self._loss_tracker = KerasMean(name="loss")
        self._steps = None
        self._override_steps = {}
        self._test_draws = 0
        self._shuffle_rng = numpy.random.default_rng(seed)

    # -- variables ------------------------------------------------------------------

    @property
    def variables(self):
        """All collections (``params``, ``batch_stats``, ...), or None before the module is built."""
        return self._state.variables() if self._state is not None else self._variables

    def set_variables(self, variables, order=None):
        """Replace the variables (the optimizer's state stays, as after Keras' ``set_weights``)."""
        variables = dict(variables)
        if self._state is not None:
            self._state = self._state.replace(params=variables.pop("params", {}), model_state=variables)
        else:
            self._variables = variables
        if order is not None:
            self._order = [tuple(p) for p in order]
        elif self._order is None:
            self._order = keras_weight_order(self.variables)
        self._order = [p for p in self._order if p[0] != "losses"]  # loss terms of the last pass, not weights

    @property
    def weight_order(self):
        """Leaf paths of the variables in Keras' weight order (``get_weights``)."""
        return list(self._order or [])

    def _changed(self):
        if self.on_update is not None:
            self.on_update(self.variables, self._order)

    def _build(self, x):
        if self.variables is not None:
            return
        self._builds[0] += 1
        key = jax.random.key(self._builds[0])
        rngs = {name: jax.random.fold_in(key, i) for i, name in enumerate(("params", "dropout", "noise"))}
        self.set_variables(self.module.init(rngs, x))
        self._changed()

    def _build_from(self, batches):
        if self.variables is None:
            self._build(batches.first())

    def _require_variables(self):
        if self.variables is None:
            raise ValueError("The model has no variables yet: call it, fit it or load weights first")
        return self.variables

    def get_weights(self):
        """The variables as NumPy arrays in Keras' order (``keras_weight_order``), Flax layouts."""
        variables = self._require_variables()
        out = []
        for path in self._order:
            value = variables
            for key in path:
                value = value[key]
            out.append(numpy.asarray(value))
        return out

    def set_weights(self, weights):
        """Keras' ``set_weights``: arrays in ``get_weights`` order, shapes checked."""
        variables = self._require_variables()
        if len(weights) != len(self._order):
            raise ValueError(f"You called `set_weights(weights)` with a weight list of length {len(weights)}, "
                             f"but the model was expecting {len(self._order)} weights.")
        new = jax.tree_util.tree_map(lambda v: v, variables)
        for path, value in zip(self._order, weights):
            node = new
            for key in path[:-1]:
                node[key] = dict(node[key])
                node = node[key]
            if numpy.shape(node[path[-1]]) != numpy.shape(value):
                raise ValueError(f"Weight {'/'.join(path)} has shape {numpy.shape(node[path[-1]])}, "
                                 f"not compatible with the provided shape {numpy.shape(value)}.")
            node[path[-1]] = jax.numpy.asarray(value, jax.numpy.asarray(node[path[-1]]).dtype)
        self.set_variables(new)
        self._changed()

    def save_weights(self, filepath, overwrite=True):
        """The variables, as an orbax checkpoint at ``filepath`` (a directory; see ``keras_checkpoint_save``)."""
        keras_checkpoint_save(filepath, {"variables": self._require_variables()},
                              {"keras_order": [list(p) for p in self._order]}, overwrite=overwrite)

    def save(self, filepath, overwrite=True):
        """What ``model.save`` keeps of training: variables, optimizer state and step (no architecture)."""
        tree = {"variables": self._require_variables()}
        if self._state is not None:
            tree.update(opt_state=self._state.opt_state, step=self._state.step)
        keras_checkpoint_save(filepath, tree, {"keras_order": [list(p) for p in self._order]}, overwrite=overwrite)

    def load_weights(self, filepath):
        """Variables saved by ``save_weights``/``save`` (or ``ModelCheckpoint``), checked against the model's."""
        tree, metadata = keras_checkpoint_restore(filepath)
        loaded = tree["variables"]
        if self.variables is not None:
            have = jax.tree_util.tree_map(numpy.shape, self.variables)
            got = jax.tree_util.tree_map(numpy.shape, loaded)
            if have != got:
                raise ValueError(f"The checkpoint at {filepath} holds other variables than the model: {got} vs {have}")
        self.set_variables(jax.tree_util.tree_map(jax.numpy.asarray, loaded), order=metadata.get("keras_order"))
        self._changed()

    @property
    def iterations(self):
        """The number of optimizer steps taken (Keras' ``optimizer.iterations``)."""
        return 0 if self._state is None else int(self._state.step)

    @property
    def learning_rate(self):
        """Keras' ``optimizer.learning_rate``: the rate of the next update, from the compiled
        optimizer's schedule at ``iterations`` (a translated optimizer carries it: KerasOptimizer)."""
        self._require_compiled("optimizer.learning_rate")
        if not hasattr(self._tx, "learning_rate_at"):
            raise TypeError(f"the compiled optimizer {self._tx!r} carries no Keras learning rate: "
                            "wrap it as KerasOptimizer(tx, learning_rate=...)")
        return self._tx.learning_rate_at(self.iterations)

    # -- compile ----------------------------------------------------------------------

    def compile(self, optimizer, loss=None, loss_weights=None, metrics=None, weighted_metrics=None,
                run_eagerly=False, steps_per_execution=1, jit_compile="auto", auto_scale_loss=True):
        """Keras' ``compile`` with an optax ``optimizer`` (the rules write Keras' default, RMSprop, out
        and resolve the strings Keras accepts)."""
        if isinstance(optimizer, str) or not hasattr(optimizer, "update"):
            raise TypeError(f"optimizer must be an optax GradientTransformation, got {optimizer!r}")
        if loss_weights is not None and not isinstance(loss_weights, (int, float)):
            raise NotImplementedError("per-output loss_weights (several model outputs) are not supported")
        if optimizer is not self._tx:
            self._variables, self._state = self.variables, None  # a new optimizer starts from zero
        self._tx = optimizer
        self._loss = self._as_loss(loss)
        self._loss_weights = loss_weights
        self._metrics = self._as_metrics(metrics)
        self._weighted_metrics = self._as_metrics(weighted_metrics)
        self._loss_tracker = KerasMean(name="loss")
        self._steps = None
        self._override_steps = {}
        self.compiled = True
        self.stop_training = False

    @staticmethod
    def _as_loss(loss):
        if loss is None:
            return None
        if isinstance(loss, (str, dict, list, tuple)):
            raise NotImplementedError(f"loss={loss!r}: strings are resolved by tern when it translates compile(); "
                                      "per-output losses are not supported")
        if getattr(getattr(loss, "func", None), "__name__", None) == "keras_loss":
            return loss  # a Keras loss object, translated: it reduces itself
        return functools.partial(keras_loss, loss)  # a function of (y_true, y_pred): LossFunctionWrapper

    @staticmethod
    def _as_metrics(metrics):
        if metrics is None:
            return []
        if isinstance(metrics, dict) or not isinstance(metrics, (list, tuple)):
            raise NotImplementedError(f"metrics={metrics!r}: a list is expected (per-output metrics are not supported)")
        out = []
        for metric in metrics:
            if isinstance(metric, str):
                raise NotImplementedError(f"metric {metric!r}: strings are resolved by tern when it translates compile()")
            if not hasattr(metric, "update_state"):
                name = getattr(metric, "name", None) or KerasTrainer._snake(getattr(metric, "__name__", type(metric).__name__))
                metric = KerasMeanMetricWrapper(metric, name=name)
            out.append(metric)
        return out

    @staticmethod
    def _snake(name):
        import re

        name = re.sub(r"\W+", "", name)
        name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
        return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()

    def metric_direction(self, name):
        """``"up"``/``"down"`` for the compiled metric named ``name`` (None if unknown)."""
        for metric in self._metrics + self._weighted_metrics:
            if metric.name == name:
                fn = getattr(metric, "fn", None)
                key = getattr(fn, "__name__", None) if fn is not None else type(metric).__name__
                return getattr(metric, "direction", None) or self.DIRECTIONS.get(key)
        return None

    @property
    def metrics_names(self):
        return ["loss", *[m.name for m in self._metrics + self._weighted_metrics]] if self.compiled else []

    # -- steps ------------------------------------------------------------------------

    def _loss_of(self, y, y_pred, sample_weight, collections):
        """Keras' ``compute_loss``: the compiled loss, then each term of ``model.losses`` summed."""
        if not isinstance(y_pred, jax.Array):
            raise NotImplementedError("models with several outputs are not supported by the translated fit")
        losses = []
        if self._loss is not None:
            loss = jax.numpy.asarray(self._loss(y, y_pred, sample_weight), jax.numpy.float32)
            losses.append(loss if self._loss_weights is None else loss * self._loss_weights)
        for term in jax.tree_util.tree_leaves(collections.get("losses", {})):
            term = jax.numpy.asarray(term)
            losses.append(jax.numpy.sum(term if jax.numpy.issubdtype(term.dtype, jax.numpy.floating)
                                        else term.astype(jax.numpy.float32)))
        if not losses:
            raise ValueError("No loss to compute. Provide a `loss` argument in `compile()`.")
        return losses[0] if len(losses) == 1 else jax.numpy.sum(jax.numpy.stack(losses))

    def _jitted(self):
        if self._steps is None:
            loss_of = self._loss_of

            def train_step(state, x, y, sample_weight):
                def compute_loss(params):
                    y_pred, model_state = state.apply_model(params, x, training=True)
                    return loss_of(y, y_pred, sample_weight, model_state), (y_pred, model_state)

                (loss, (y_pred, model_state)), grads = jax.value_and_grad(compute_loss, has_aux=True)(state.params)
                return state.apply_gradients(grads=grads, model_state=model_state), loss, y_pred

            def test_step(state, x, y, sample_weight):
                terms = {}
                if "losses" in state.model_state:  # the pass records its loss terms only where they may change
                    kwargs = state.keras_call_kwargs({"training": False})
                    y_pred, terms = state.apply_fn(state.variables(), x, mutable=["losses"], **kwargs)
                else:
                    y_pred = state.predict(x, training=False)
                return loss_of(y, y_pred, sample_weight, terms), y_pred

            self._steps = (jax.jit(train_step), jax.jit(test_step))
        return self._steps

    def _train_state(self):
        if self._state is None:
            self._state = KerasTrainState.of_module(self.module, self._variables, self._tx, seed=self.seed)
            self._variables = None
        return self._state

    def _require_compiled(self, method):
        if not self.compiled:
            raise ValueError(f"You must call `compile()` before using the model (`{method}`).")

    def _reset_metrics(self, override=False):
        """Keras' ``reset_metrics``: every metric of ``model.metrics`` (the class's own with an override)."""
        for metric in (self.module.metrics if override else (self._loss_tracker, *self._metrics, *self._weighted_metrics)):
            metric.reset_state()

    # -- translated train_step / test_step overrides --------------------------------------

    def _overrides(self, name):
        """Whether the module's class carries a translated Keras ``name`` override (``name`` and ``name_logs``)."""
        return callable(getattr(type(self.module), f"{name}_logs", None))

    def _override_step(self, name):
        if name not in self._override_steps:
            self._override_steps[name] = jax.jit(getattr(self.module, name))
        return self._override_steps[name]

    @staticmethod
    def _pythonify(logs):
        """Keras' ``pythonify_logs``: sorted, nested dicts flattened, values as floats where they convert."""
        out = {}
        for key, value in sorted((logs or {}).items()):
            if isinstance(value, dict):
                out.update(KerasTrainer._pythonify(value))
                continue
            try:
                value = float(numpy.asarray(value))
            except (TypeError, ValueError):
                pass
            out[key] = value
        return out

    def _metrics_or(self, logs):
        """Keras' ``_get_metrics_result_or_logs``: the metrics' results if their names are the logs' keys."""
        results = {}
        for metric in self.module.metrics:
            result = metric.result()
            if isinstance(result, dict):
                results.update(result)
            else:
                results[metric.name] = result
        results = self._pythonify(results)
        return results if isinstance(logs, dict) and set(logs) == set(results) else logs

    def _evaluation_state(self):
        """The state with a key of this evaluation batch's own for dropout and noise."""
        self._test_draws += 1
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(self.seed), 1), self._test_draws)
        return self._train_state().replace(rng=key)

    def _override_guard(self, method):
        other = {"fit": "train_step", "evaluate": "test_step"}[method]
        if not self._overrides(other) and self._overrides("test_step" if other == "train_step" else "train_step"):
            raise NotImplementedError(
                f"`{type(self.module).__name__}` overrides a Keras step but not `{other}`: Keras' default `{other}` "
                "would report the class's own `metrics`; not translated")
        return self._overrides(other)

    def _update_metrics(self, loss, x, y, y_pred, sample_weight):
        size = next(numpy.shape(leaf)[0] for leaf in jax.tree_util.tree_leaves(x))
        self._loss_tracker.update_state(numpy.asarray(loss), sample_weight=size)
        for metric in self._metrics:
            metric.update_state(y, y_pred)
        for metric in self._weighted_metrics:
            metric.update_state(y, y_pred, sample_weight=sample_weight)

    def _logs(self):
        """Keras' ``get_metrics_result``: the loss, then compile metrics with Keras' name de-duplication."""
        logs = {"loss": self._loss_tracker.result()}
        seen = {}
        for metric in self._metrics:
            name = metric.name
            if name in seen:
                seen[name] += 1
                name = f"{name}_{seen[name] - 1}"
            else:
                seen[name] = 1
            logs[name] = metric.result()
        for metric in self._weighted_metrics:
            name = metric.name
            if name not in seen:
                seen[name] = 1
            else:
                name = f"weighted_{metric.name}"
                if name not in seen:
                    seen[name] = 1
                else:
                    seen[name] += 1
                    name = f"{name}_{seen[name] - 1}"
            logs[name] = metric.result()
        return {key: float(value) for key, value in sorted(logs.items())}

    @staticmethod
    def _call(callbacks, hook, *args):
        for callback in callbacks:
            method = getattr(callback, hook, None)
            if method is not None:
                method(*args)

    # -- fit / evaluate / predict -------------------------------------------------------

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, class_weight=None, sample_weight=None, initial_epoch=0,
            steps_per_epoch=None, validation_steps=None, validation_batch_size=None, validation_freq=1):
        """Keras' ``fit``: an epoch loop over the batches, jitted steps, metrics, callbacks; returns the History."""
        self._require_compiled("fit")
        override = self._override_guard("fit")
        if class_weight is not None:
            raise NotImplementedError("class_weight is not supported by the translated fit: pass sample_weight")
        if validation_split and validation_data is None:
            (x, y, sample_weight), validation_data = self._split((x, y, sample_weight), validation_split)
        batches = KerasEpochIterator(x, y, sample_weight, batch_size, steps_per_epoch, shuffle, self._shuffle_rng,
                                     packed=override)
        callbacks = list(jax.tree_util.tree_leaves(callbacks or [], is_leaf=lambda c: not isinstance(c, (list, tuple))))
        history = next((c for c in callbacks if type(c).__name__ == "KerasHistory"), None)
        if history is None:
            history = KerasHistory()
            callbacks.append(history)
        self.history = history
        for callback in callbacks:
            callback.set_model(self)
            if hasattr(callback, "set_params"):
                callback.set_params({"verbose": verbose, "epochs": epochs, "steps": batches.num_batches})
        train_step, _ = self._jitted()
        self._build_from(batches)
        self.stop_training = False
        self._call(callbacks, "on_train_begin", None)
        training_logs = None
        for epoch in range(initial_epoch, epochs):
            self._reset_metrics(override)
            self._call(callbacks, "on_epoch_begin", epoch, None)
            logs = {}
            for step, batch in batches.epoch():
                self._call(callbacks, "on_train_batch_begin", step, None)
                if override:
                    self._state, values = self._override_step("train_step")(self._train_state(), batch)
                    logs = self._pythonify(self.module.train_step_logs(**values))
                else:
                    bx, by, bw = batch
                    self._state, loss, y_pred = train_step(self._train_state(), bx, by, bw)
                    self._update_metrics(loss, bx, by, y_pred, bw)
                    logs = self._logs()
                self._call(callbacks, "on_train_batch_end", step, logs)
                if self.stop_training:
                    break
            epoch_logs = dict(self._metrics_or(logs)) if override else self._logs()
            self._changed()
            if validation_data is not None and self._should_eval(epoch, validation_freq):
                val_x, val_y, val_weight = KerasEpochIterator.unpack(validation_data)
                val_logs = self.evaluate(val_x, val_y, batch_size=validation_batch_size or batch_size,
                                         sample_weight=val_weight, steps=validation_steps, callbacks=callbacks,
                                         return_dict=True)
                epoch_logs.update({f"val_{name}": value for name, value in val_logs.items()})
                epoch_logs = dict(sorted(epoch_logs.items()))
            self._call(callbacks, "on_epoch_end", epoch, epoch_logs)
            training_logs = epoch_logs
            if self.stop_training:
                break
        self._call(callbacks, "on_train_end", training_logs)
        self._changed()
        return self.history

    @staticmethod
    def _should_eval(epoch, validation_freq):
        if isinstance(validation_freq, int):
            return (epoch + 1) % validation_freq == 0
        return (epoch + 1) in validation_freq

    @staticmethod
    def _split(arrays, validation_split):
        """Keras' ``train_validation_split``: the last ``validation_split`` of the samples, unshuffled."""
        if any(hasattr(a, "as_numpy_iterator") for a in arrays):
            raise ValueError("Argument `validation_split` is only supported for tensors or NumPy arrays.")
        leaves = jax.tree_util.tree_leaves(arrays)
        total = numpy.shape(leaves[0])[0]
        at = int(numpy.floor(total * (1.0 - validation_split)))
        if at == 0 or at == total:
            raise ValueError(f"Training data contains {total} samples, which is not sufficient to split it into a "
                             f"validation and training set as specified by `validation_split={validation_split}`.")
        train = jax.tree_util.tree_map(lambda a: numpy.asarray(a)[:at], arrays)
        val = jax.tree_util.tree_map(lambda a: numpy.asarray(a)[at:], arrays)
        return train, val

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None,
                 callbacks=None, return_dict=False):
        """Keras' ``evaluate``: the loss and metrics over every batch (no shuffling, no update)."""
        self._require_compiled("evaluate")
        override = self._override_guard("evaluate")
        batches = KerasEpochIterator(x, y, sample_weight, batch_size, steps, False, packed=override)
        callbacks = list(jax.tree_util.tree_leaves(callbacks or [], is_leaf=lambda c: not isinstance(c, (list, tuple))))
        _, test_step = self._jitted()
        self._build_from(batches)
        self._call(callbacks, "on_test_begin", None)
        self._reset_metrics(override)
        logs = {}
        for step, batch in batches.epoch():
            self._call(callbacks, "on_test_batch_begin", step, None)
            if override:
                values = self._override_step("test_step")(self._evaluation_state(), batch)
                logs = self._pythonify(self.module.test_step_logs(**values))
            else:
                bx, by, bw = batch
                loss, y_pred = test_step(self._train_state(), bx, by, bw)
                self._update_metrics(loss, bx, by, y_pred, bw)
                logs = self._logs()
            self._call(callbacks, "on_test_batch_end", step, logs)
        logs = self._pythonify(self._metrics_or(logs)) if override else self._logs()
        self._call(callbacks, "on_test_end", logs)
        if return_dict:
            return logs
        if override:  # Keras' _flatten_metrics_in_order over the class's metrics
            names = [m.name for m in self.module.metrics]
            results = [logs[name] for name in names if name in logs] + [logs[k] for k in sorted(logs) if k not in names]
            return results[0] if len(results) == 1 else results
        names = ["loss", *[m.name for m in self._metrics + self._weighted_metrics]]
        results = [logs[name] for name in names if name in logs]
        results += [logs[key] for key in sorted(logs) if key not in names]
        return results[0] if len(results) == 1 else results

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        """Keras' ``predict``: the outputs of every batch in inference mode, concatenated, as NumPy."""
        batches = KerasEpochIterator(x, None, None, batch_size, steps, False)
        callbacks = list(jax.tree_util.tree_leaves(callbacks or [], is_leaf=lambda c: not isinstance(c, (list, tuple))))
        self._build_from(batches)
        self._call(callbacks, "on_predict_begin", None)
        outputs = []
        for step, (bx, _, _) in batches.epoch():
            self._call(callbacks, "on_predict_batch_begin", step, None)
            out = self._predict_step(self._inference_state(), bx)
            outputs.append(out)
            self._call(callbacks, "on_predict_batch_end", step, {"outputs": out})
        self._call(callbacks, "on_predict_end", None)
        return jax.tree_util.tree_map(lambda *parts: numpy.concatenate([numpy.asarray(p) for p in parts]), *outputs)

    def _inference_state(self):
        if self._state is not None:
            return self._state
        return KerasTrainState.from_variables(self.module.apply, self._variables, optax.identity())

    @functools.cached_property
    def _predict_step(self):
        return jax.jit(lambda state, x: state.predict(x, training=False))
