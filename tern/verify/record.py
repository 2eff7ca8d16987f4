"""TF worker task: run the original tests under a recorder of package-layer calls.

For every *top-level* call of a layer or model that the package defines (a class, or a
model a package function builds), the recorder keeps: how to construct it again (the
class and its constructor arguments, or the factory and its arguments), its variables
as ported units (``port.py``), its inputs with ``training``/``mask``, and its outputs.
For float inputs it also keeps gradients of ``sum(outputs * cotangent)`` with respect to
inputs and trainable variables. Nested calls are covered by their outermost call (a
nested layer inherits ``training`` from Keras's call context, which a replay could not
reproduce faithfully).

The recorder re-runs each call itself (under a ``GradientTape``, twice) and restores
every variable afterwards, so the test sees the state it would have seen without it.
Two re-runs that differ mark the call *stochastic* (dropout in training, sampling): it is
recorded with its random draws, which the replay injects (``draws.py``), or, where they
cannot be injected, with many runs of its sampled outputs, which the replay compares as
distributions (``distributions.py``).

Training steps the tests call are recorded alongside, by ``step_record.py``.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from tern.sandbox.jobs import OUTPUT
from tern.engine.support_module import is_generated
from tern.verify.arrays import Unpackable, origin_target, pack, shift, unpack, unpack_built, write_case
from tern.verify.distributions import affordable_runs
from tern.verify.draws import DrawsDoNotLineUp, DrawTape, pack_draws
from tern.verify.interface import keras_defaults
from tern.verify.junit import run_pytest
from tern.verify.port import keras_units
from tern.verify.probes import judged_leaves, probe_inputs
from tern.verify.record_config import compiled_state, record_config_call
from tern.verify.record_functions import record_function_call
from tern.verify.step_record import StepRecorder
from tern.verify.tf_orders import sorted_patches
from tern.verify.variants import argument_variants
from tern.weights.port import variable_path

COTANGENT_SEED = 1234
VARIANTS = 2  # configurations per layer or factory beyond the tests' (``record_variants``)
#: Keras's entry points that call a model inside a traced function (``record_trained``)
TRAINED_THROUGH = ("fit", "evaluate", "predict")
TRAINED_SAMPLES = 4  # of a model's first ``x``, called once more after the tests
#: calls per training-configuration function beyond the tests' (``record_config_variants``):
#: an optimizer's trajectories cost milliseconds, and a factory has a handful of parameters
CONFIG_VARIANTS = 6


def _tf():
    import tensorflow as tf

    return tf


def to_numpy(value: Any) -> np.ndarray | None:
    tf = _tf()
    if isinstance(value, (tf.Tensor, tf.Variable)) or hasattr(value, "numpy") and hasattr(value, "dtype"):
        array = np.asarray(value.numpy())
        if array.dtype == object:  # tf.string tensors: bytes, stored as a fixed-width bytes array
            array = array.astype(bytes)
        return array
    if isinstance(value, np.ndarray) and value.dtype == object:
        return value.astype(bytes)
    return None


class Recorder:
    """Holds the patches and what they captured; ``close`` undoes every patch."""

    def __init__(self, out: Path, max_per_target: int = 3):
        self.out = out
        self.max_per_target = max_per_target
        self.cases: list[dict] = []  # {"id", "target", ...} summaries
        self.skipped: dict[str, dict[str, int]] = {}  # target -> reason -> count
        self.per_target: dict[str, int] = {}
        self.seen: set[str] = set()
        self.depth = 0
        self.other_mode: set[str] = set()  # targets also recorded in the mode their tests did not use
        self.draw_tape = DrawTape()  # installed around the tests (``record_tests``): idle unless a rerun records
        self.probed: set[tuple[str, bool]] = set()  # (target, training) already probed beyond its inputs
        self.probed_functions: set[str] = set()  # package functions already probed
        self.varied: set[str] = set()  # targets whose first case is kept to build again (``record_variants``)
        self.variant_seeds: list[tuple] = []  # (call, origin, args, kwargs) of each such case
        self.function_depth = 0  # inside a package function's call: its own calls are covered by it
        self.trained: dict[int, tuple[Any, Any]] = {}  # id -> (model, its first samples): ``record_trained``
        self.config_seeds: list[tuple] = []  # (module, name, fn, args, kwargs): ``record_config_variants``
        self.replaying = False
        self._undo: list[tuple[Any, str, Any]] = []

    # -- patching ---------------------------------------------------------------------

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self._undo.append((owner, name, owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else getattr(owner, name)))
        setattr(owner, name, value)

    def close(self) -> None:
        for owner, name, old in reversed(self._undo):
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
        self._undo.clear()

    def install(self, modules: list[Any], layer_bases: list[type]) -> None:
        """Tag instances of package classes and models built by package functions, and
        record calls of tagged layers."""
        classes: set[type] = set()
        for module in modules:
            for attr, value in list(vars(module).items()):
                if getattr(value, "__module__", None) != module.__name__:
                    continue
                if isinstance(value, type) and any(issubclass(value, b) for b in layer_bases):
                    if "<locals>" not in value.__qualname__:
                        classes.add(value)
                elif callable(value) and not isinstance(value, type) and (hasattr(value, "__code__")
                                                                          or hasattr(value, "python_function")):
                    self._patch(module, attr, self._factory_wrapper(module.__name__, attr, value))
        for base in layer_bases:
            for cls in base.__mro__:
                if "__call__" in cls.__dict__ and cls.__module__.split(".")[0] in {"keras", "tf_keras"}:
                    self._patch(cls, "__call__", self._call_wrapper(cls.__dict__["__call__"]))
                    break
        # Constructor arguments are taken in ``__new__``, which sees them exactly as given
        # (wrapping ``__init__`` would change the signature Keras inspects for its config).
        for cls in classes:
            self._patch(cls, "__new__", staticmethod(self._new_wrapper(cls, cls.__new__)))
        for model_base in _model_bases(layer_bases):
            for name in TRAINED_THROUGH:
                self._patch(model_base, name, self._trained_wrapper(getattr(model_base, name)))

    def _new_wrapper(self, owner: type, new: Any):
        def __new__(cls, *args, **kwargs):
            # object.__new__ refuses constructor arguments once __new__ is overridden
            instance = new(cls) if new is object.__new__ else new(cls, *args, **kwargs)
            if cls is owner:
                origin = {"kind": "class", "module": cls.__module__, "name": cls.__qualname__}
                try:
                    origin["args"] = pack(list(args), [], _never, _built_by_package)
                    origin["kwargs"] = pack(dict(kwargs), [], _never, _built_by_package)
                except Unpackable as exc:
                    origin["unpackable"] = f"constructor arguments: {exc}"
                instance.__dict__["_tern_origin"] = origin  # bypass Keras attribute tracking
            return instance

        return __new__

    def _factory_wrapper(self, module: str, name: str, fn: Any):
        recorder = self

        def factory(*args, **kwargs):
            outermost = not (recorder.depth or recorder.function_depth or recorder.replaying)
            before = compiled_state(args, kwargs) if outermost else {}
            recorder.function_depth += 1
            try:
                result = fn(*args, **kwargs)
            finally:
                recorder.function_depth -= 1
            if outermost:
                try:
                    if record_config_call(recorder, module, name, args, kwargs, result, before) \
                            and f"{module}:{name}" not in recorder.varied:
                        recorder.varied.add(f"{module}:{name}")
                        recorder.config_seeds.append((module, name, fn, args, kwargs))
                except Exception:  # noqa: BLE001 - a recorder failure must never fail the user's test
                    recorder.skip({"module": module, "name": name},
                                  "recorder error: " + traceback.format_exc(limit=2).splitlines()[-1])
            if outermost and not (hasattr(result, "weights") and hasattr(result, "call")):
                try:
                    record_function_call(recorder, module, name, fn, args, kwargs, result)
                except Exception:  # noqa: BLE001 - a recorder failure must never fail the user's test
                    recorder.skip({"module": module, "name": name},
                                  "recorder error: " + traceback.format_exc(limit=2).splitlines()[-1])
            if hasattr(result, "weights") and hasattr(result, "call") and "_tern_origin" not in result.__dict__:
                origin = {"kind": "factory", "module": module, "name": name}
                try:
                    origin["args"] = pack(list(args), [], _never, _built_by_package)
                    origin["kwargs"] = pack(dict(kwargs), [], _never, _built_by_package)
                except Unpackable as exc:
                    origin["unpackable"] = f"factory arguments: {exc}"
                result.__dict__["_tern_origin"] = origin
            return result

        factory.__wrapped__ = fn
        return factory

    def _call_wrapper(self, call: Any):
        recorder = self

        def __call__(layer, *args, **kwargs):
            origin = layer.__dict__.get("_tern_origin")
            if origin is None or recorder.replaying or recorder.depth:
                return call(layer, *args, **kwargs)
            recorder.depth += 1
            try:
                outputs = call(layer, *args, **kwargs)
            finally:
                recorder.depth -= 1
            try:
                recorder.record(call, layer, origin, args, kwargs)
            except Exception:  # noqa: BLE001 - a recorder failure must never fail the user's test
                recorder.skip(origin, "recorder error: " + traceback.format_exc(limit=2).splitlines()[-1])
            return outputs

        __call__.__wrapped__ = call
        return __call__

    # -- recording --------------------------------------------------------------------

    def skip(self, origin: dict, reason: str) -> None:
        target = _target(origin)
        bucket = self.skipped.setdefault(target, {})
        bucket[reason] = bucket.get(reason, 0) + 1

    def record(self, call: Any, layer: Any, origin: dict, args: tuple, kwargs: dict, other_mode_of: Any = None,
               variant: str = "") -> None:
        """``other_mode_of``: the outputs of the test's own call, when this is its rerun in the
        other ``training`` mode (``_record_other_mode``); ``variant``: the change, when this is
        a call of the layer built in another configuration (``record_variants``)."""
        tf = _tf()
        target = _target(origin)
        if not tf.executing_eagerly():
            return self.skip(origin, "called inside a traced tf.function")
        if "unpackable" in origin:
            return self.skip(origin, origin["unpackable"])
        if self.per_target.get(target, 0) >= self.max_per_target and other_mode_of is None and not variant:
            return None
        try:
            inputs = pack([list(args), dict(kwargs)], arrays := [], to_numpy)
        except Unpackable as exc:
            return self.skip(origin, f"inputs: {exc}")
        signature = json.dumps([target, origin.get("args"), origin.get("kwargs"), inputs,
                                [(a.shape, str(a.dtype)) for a in arrays]], sort_keys=True, default=str)
        if signature in self.seen:
            return None
        self.seen.add(signature)
        case = self._rerun(call, layer, args, kwargs)
        if isinstance(case, str):  # a variant that is not reproducible is left out without a word: it is extra
            if other_mode_of is None and not variant:
                self.skip(origin, case)
                # a random call in training mode: its inference mode may be reproducible
                self._record_other_mode(call, layer, origin, args, kwargs, _NOT_RECORDED)
            return None
        if other_mode_of is not None and other_mode_of is not _NOT_RECORDED and _same_outputs(case["outputs"], other_mode_of):
            return None  # the mode changes nothing here: the test's own case says it all
        started = time.perf_counter()
        probes = [] if variant else self._probe(call, layer, target, args, kwargs, case)  # a variant is not searched
        probe_ms = (time.perf_counter() - started) * 1000
        units_meta, unit_arrays = _pack_units(layer, None)
        grads = case.pop("grads_by_id")
        gunits_meta, gunit_arrays = _pack_units(layer, lambda v: grads.get(id(v), np.zeros(v.shape, v.dtype.name if hasattr(v.dtype, "name") else v.dtype)))
        all_arrays = list(arrays)
        outputs = pack(case["outputs"], all_arrays)
        cotangents = pack(case["cotangents"], all_arrays)
        input_grads = pack(case["input_grads"], all_arrays)
        offset = len(all_arrays)
        all_arrays.extend(unit_arrays)
        units = shift(units_meta, offset)
        offset = len(all_arrays)
        all_arrays.extend(gunit_arrays)
        grad_units = shift(gunits_meta, offset)
        # the Keras weights as they are, in Keras's order: a float64 rebuild (``reference.py``) takes them
        weights = [{"path": variable_path(v), "array": len(all_arrays) + i} for i, v in enumerate(layer.weights)]
        all_arrays.extend(np.array(v.numpy()) for v in layer.weights)
        state_units = []
        if case["updated"]:  # the state the call left (moving statistics): ported like the weights
            updated = case["updated"]
            state_meta, state_arrays = _pack_units(layer, lambda v: updated.get(id(v), np.array(v.numpy())))
            state_units = shift(state_meta, len(all_arrays))
            all_arrays.extend(state_arrays)
        probes = [{"name": name, "inputs": pack(floats, all_arrays), "outputs": pack(outputs, all_arrays),
                   "compared": compared} for name, floats, outputs, compared in probes]
        ident = hashlib.sha256(signature.encode()).hexdigest()[:16]
        meta = {"id": ident, "target": target, "origin": origin, "inputs": inputs, "outputs": outputs,
                "cotangents": cotangents, "input_grads": input_grads, "float_inputs": case["float_inputs"],
                "units": units, "grad_units": grad_units, "weights": weights, "layer": type(layer).__name__,
                **({"stochastic": case["stochastic"]} if case["stochastic"] else {}),
                **({"probes": probes, "probe_ms": probe_ms} if probes else {}),
                **({"state_units": state_units} if state_units else {}),
                **({"no_gradient": case["no_gradient"]} if case["no_gradient"] else {}),
                **({"samples": {"leaves": case["samples"]["leaves"], "runs": pack(case["samples"]["runs"], all_arrays)}}
                   if case["samples"] else {}),
                **({"draws": pack_draws(case["draws"], all_arrays), "sampled": case["sampled"]} if case["draws"] else {}),
                **({"variant": variant} if variant else {}),
                "defaults": keras_defaults(layer, origin, _factory(origin))}
        write_case(self.out, ident, meta, all_arrays)
        self.per_target[target] = self.per_target.get(target, 0) + 1
        self.cases.append({"id": ident, "target": target})
        if other_mode_of is None and not variant:
            self._record_other_mode(call, layer, origin, args, kwargs, case["outputs"])
            if target not in self.varied and origin.get("kind") in ("class", "factory") and not (
                    case["stochastic"] or case["draws"] or case["opaque_draws"] or case["samples"]):
                self.varied.add(target)
                self.variant_seeds.append((call, origin, args, kwargs))
        return None

    def _trained_wrapper(self, method: Any):
        """``fit``/``evaluate``/``predict``: Keras calls the model inside a traced function,
        where no call is recorded; the model and its first samples are kept for
        ``record_trained``. Nothing is read from a dataset or a generator: taking a batch
        would move its shuffling, which the test would then see."""
        recorder = self

        def entry(model, *args, **kwargs):
            if not recorder.replaying and id(model) not in recorder.trained and "_tern_origin" in model.__dict__:
                first = _first_samples(args[0] if args else kwargs.get("x"))
                if first is not None:
                    recorder.trained[id(model)] = (model, first)
            return method(model, *args, **kwargs)

        entry.__wrapped__ = method
        return entry

    def record_trained(self) -> None:
        """Each package model the tests used only through ``fit``, ``evaluate`` or
        ``predict`` (no call of its target recorded), called once more after the tests on the
        first ``TRAINED_SAMPLES`` samples it was given, and recorded as a test's call would
        be: its outputs, gradients and other mode are replayed at the weights the tests left
        it with (ported, as always), its initial weights compared, its configurations varied.
        Run after the tests, so that nothing a test sees changes."""
        for model, first in self.trained.values():
            origin = model.__dict__["_tern_origin"]
            if self.per_target.get(_target(origin), 0):
                continue  # its target was called by a test: that case says what this one would
            try:
                model(first)  # recorded by the patched ``__call__``
            except Exception:  # noqa: BLE001 - the model refuses its own samples alone: not compared
                self.skip(origin, "used only through fit/evaluate/predict, and its first samples could not be "
                                  "passed to it alone: " + traceback.format_exc(limit=1).strip().splitlines()[-1][:200])
        self.trained.clear()

    def record_config_variants(self) -> None:
        """Each package function with a recorded training configuration called again with
        one plain argument changed (``variants.py``), up to ``CONFIG_VARIANTS`` per function,
        and recorded as a configuration case of its own, marked ``variant``: a formula a
        test's value hides (``g * clipnorm / max(norm, clipnorm)`` against ``g / clipnorm``
        agrees at ``clipnorm=1.0``) is compared at another. Run after the tests. A function
        given a model or an array (``compile_classifier(model)``) is not varied: calling it
        again would configure the test's own objects."""
        for module, name, fn, args, kwargs in self.config_seeds:
            try:
                packed = [pack(list(args), [], _never), pack(dict(kwargs), [], _never)]
            except Unpackable:
                continue  # a model or an array among the arguments: its configurations are the tests'
            for change in argument_variants(fn, packed, limit=CONFIG_VARIANTS):
                built_args, built_kwargs = unpack(change["inputs"], [])
                before = compiled_state(built_args, built_kwargs)
                self.function_depth += 1  # the function's own calls are not the tests'
                self.replaying = True
                try:
                    result = fn(*built_args, **built_kwargs)
                except Exception:  # noqa: BLE001 - Keras refuses this configuration: no variant
                    continue
                finally:
                    self.function_depth -= 1
                    self.replaying = False
                try:
                    record_config_call(self, module, name, tuple(built_args), built_kwargs, result, before,
                                       variant=change["name"])
                except Exception:  # noqa: BLE001 - a recorder failure must never fail the run
                    continue
        self.config_seeds.clear()

    def record_variants(self) -> None:
        """Each layer or factory with a recorded case built again with one plain
        constructor (or factory) argument changed (``variants.py``), at most ``VARIANTS`` per
        target, called on its first case's inputs and recorded as a case of its own, marked
        ``variant``: a branch on configuration the tests never take (``if strides != 1 or
        ...``) is compared too. Run after the tests, so that the layers it builds change nothing
        a test sees (Keras's layer name counters); a configuration Keras refuses (an error
        building or calling it) is not recorded."""
        for call, origin, args, kwargs in self.variant_seeds:
            try:
                maker = origin_target(origin)
            except (ImportError, AttributeError):
                continue
            made = 0
            for change in argument_variants(getattr(maker, "__wrapped__", maker), [origin["args"], origin["kwargs"]]):
                if made == VARIANTS:
                    break
                # a layer among the arguments is built again as the test built it (and tagged)
                built_args, built_kwargs = unpack_built(change["inputs"], [])
                self.function_depth += 1  # a factory's own calls are not the tests'
                self.replaying = True
                try:
                    layer = maker(*built_args, **built_kwargs)
                    call(layer, *args, **kwargs)  # built, in a configuration Keras takes
                except Exception:  # noqa: BLE001 - Keras refuses this configuration: no variant
                    continue
                finally:
                    self.function_depth -= 1
                    self.replaying = False
                if layer.__dict__.get("_tern_origin") is None:
                    continue
                made += 1
                try:
                    self.record(call, layer, layer.__dict__["_tern_origin"], args, kwargs, variant=change["name"])
                except Exception:  # noqa: BLE001 - a recorder failure must never fail the run
                    self.skip(origin, "recorder error: " + traceback.format_exc(limit=2).splitlines()[-1])
        self.variant_seeds.clear()

    def _record_other_mode(self, call: Any, layer: Any, origin: dict, args: tuple, kwargs: dict, outputs: Any) -> None:
        """A layer whose call takes ``training`` is also recorded in the mode the test did not
        use (once per target), when its outputs differ there and are reproducible: a
        translation with the modes swapped (``deterministic`` inverted, batch statistics in
        inference) is caught even when the tests call one mode only. Random layers in
        training mode are not reproducible and are left out silently."""
        target = _target(origin)
        if target in self.other_mode or (len(args) > 1 and "training" not in kwargs):
            return
        try:
            takes_training = "training" in inspect.signature(layer.call).parameters
        except (TypeError, ValueError):
            takes_training = False
        if not takes_training:
            return
        self.other_mode.add(target)
        self.record(call, layer, origin, args, {**kwargs, "training": not bool(kwargs.get("training"))}, other_mode_of=outputs)

    def _probe(self, call: Any, layer: Any, target: str, args: tuple, kwargs: dict,
               case: dict) -> list[tuple[str, list[np.ndarray], Any, list[int]]]:
        """The call again on inputs beyond the test's (``probes.py``), for the first reproducible
        case of a layer in each mode: ``(probe, float inputs, outputs, output positions to
        compare)`` per probe Keras computed a comparable output for. Every variable is restored
        after each run, as after the recorded ones."""
        tf = _tf()
        mode = (target, bool(kwargs.get("training")))
        if case["stochastic"] or case["draws"] or case["opaque_draws"] or mode in self.probed:
            return []
        self.probed.add(mode)
        flat_in = tf.nest.flatten([list(args), dict(kwargs)])
        present = [i for i, x in enumerate(flat_in) if x is not None]
        positions = [present[i] for i in case["float_inputs"]]
        if not positions:
            return []
        variables = list(layer.variables)
        saved = [np.array(v.numpy()) for v in variables]
        found = []
        ran = False
        self.replaying = True
        try:
            for name, floats in probe_inputs([_as_np(flat_in[i]) for i in positions]):
                ran = True
                leaves = list(flat_in)
                for i, array in zip(positions, floats):
                    leaves[i] = tf.constant(array)
                call_args, call_kwargs = tf.nest.pack_sequence_as([list(args), dict(kwargs)], leaves)
                try:
                    out = tf.nest.map_structure(np.asarray, call(layer, *call_args, **call_kwargs))
                except Exception:  # noqa: BLE001 - the layer refuses this input (a checked range): no probe
                    continue
                finally:
                    for v, value in zip(variables, saved):
                        v.assign(value)
                compared = judged_leaves([leaf for leaf in tf.nest.flatten(out) if leaf is not None], set())
                if compared:
                    found.append((name, floats, out, compared))
            if ran:
                # the layer's last call was a probe's: its ``losses`` (``add_loss`` terms, activity
                # regularizers) are the probe's. Called again on the test's inputs, it holds the test's.
                try:
                    call(layer, *args, **kwargs)
                finally:
                    for v, value in zip(variables, saved):
                        v.assign(value)
        finally:
            self.replaying = False
        return found

    def _rerun(self, call: Any, layer: Any, args: tuple, kwargs: dict) -> dict | str:
        """Outputs, cotangents and gradients from fresh runs; a reason string when the call
        is not reproducible. Two runs that differ (a sampled ``z``, dropout in training) are
        run again with the first run's random draws handed back to TF (``draws.py``): when
        that reproduces the first run, the case keeps its draws, which the replay injects
        into the translation, and everything is compared. Otherwise, when some outputs
        agree between the runs and others do not (a VAE's KL term beside its sampled
        reconstruction), a third run takes the gradients of the reproducible ones alone,
        and the others are listed as ``stochastic`` (positions among the output leaves):
        not compared, no cotangent."""
        tf = _tf()
        variables = list(layer.variables)
        saved = [np.array(v.numpy()) for v in variables]
        flat_in = tf.nest.flatten([list(args), dict(kwargs)])
        arrays = {i: _as_np(x) for i, x in enumerate(flat_in) if isinstance(x, np.ndarray) or to_numpy(x) is not None}
        float_positions = [i for i, array in arrays.items() if array.dtype.kind == "f"]
        watched = {i: tf.constant(arrays[i]) for i in float_positions}

        def run(keep: list[bool] | None, with_grads: bool) -> tuple:
            leaves = [watched.get(i, x) for i, x in enumerate(flat_in)]
            call_args, call_kwargs = tf.nest.pack_sequence_as([list(args), dict(kwargs)], leaves)
            with tf.GradientTape(persistent=False) as tape:
                for t in watched.values():
                    tape.watch(t)
                out = call(layer, *call_args, **call_kwargs)
                out_leaves = tf.nest.flatten(out)
                cot = _cotangents(out_leaves)
                if keep is not None:
                    cot = [c if kept else None for c, kept in zip(cot, keep)]
                loss = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32) * c) for o, c in zip(out_leaves, cot)
                                 if c is not None] or [tf.constant(0.0)])
            trainable = list(layer.trainable_variables)
            sources = [watched[i] for i in float_positions] + trainable
            try:
                grads = tape.gradient(loss, sources) if with_grads else None
            except LookupError as exc:  # an op TF has no gradient for (RandomPoissonV2): outputs alone
                no_gradient.append(str(exc))
                cot, grads = [None] * len(cot), [None] * len(sources)
            return tf.nest.map_structure(lambda o: np.asarray(o), out), cot, grads, trainable

        def restore(advance_rng: bool = False) -> None:
            for v, value in zip(variables, saved):
                if not (advance_rng and "seed_generator" in variable_path(v)):  # let RNG state advance
                    v.assign(value)

        self.replaying = True
        draws: list = []
        samples = None
        no_gradient: list[str] = []
        try:
            with self.draw_tape.recording():
                first = run(None, True)
            first_draws, other_draws = list(self.draw_tape.draws), self.draw_tape.other
            updated = {id(v): np.array(v.numpy()) for v, value in zip(variables, saved)
                       if not v.trainable and "seed_generator" not in variable_path(v)
                       and not np.array_equal(v.numpy(), value)}  # what the call left: moving statistics
            restore(advance_rng=True)
            started = time.perf_counter()
            second = run(None, False)
            seconds_per_run = time.perf_counter() - started
            restore()
            left, right = tf.nest.flatten(first[0]), tf.nest.flatten(second[0])
            same = [np.shape(a) == np.shape(b) and np.array_equal(a, b, equal_nan=True) for a, b in zip(left, right)]
            chosen, keep = first, None
            # a call that drew is recorded with its draws even when both runs agreed (an RNG
            # state restored between them): the translation draws from its own key otherwise
            again = self._with_draws(run, restore, first, first_draws, other_draws) if first_draws else None
            if again is not None:
                chosen, draws = again, first_draws
            elif len(left) != len(right) or not all(same):
                if len(left) != len(right):
                    return "stochastic: two runs on the same inputs and weights differ"
                sampled = [i for i, kept in enumerate(same) if not kept]
                samples = self._sample(run, restore, left, sampled, seconds_per_run)
                if samples is None and not any(same):
                    return "stochastic: two runs on the same inputs and weights differ"
                keep = same
                no_gradient.clear()  # asked again of the reproducible outputs alone
                chosen = run(keep, True)
                restore()
                updated = {}
        finally:
            self.replaying = False
        _, cot, grads, trainable = chosen
        n_in = len(float_positions)
        # embedding gradients come as IndexedSlices: densify before converting
        dense = [None if g is None else np.asarray(tf.convert_to_tensor(g)) for g in grads]
        input_grads = dense[:n_in]
        grads_by_id = {id(v): g for v, g in zip(trainable, dense[n_in:]) if g is not None}
        # Positions among the non-None leaves: JAX's tree flattening drops None, tf.nest keeps it.
        present = [i for i, x in enumerate(flat_in) if x is not None]
        return {"outputs": first[0], "cotangents": [None if c is None else np.asarray(c) for c in cot],
                "input_grads": input_grads, "float_inputs": [present.index(i) for i in float_positions],
                "grads_by_id": grads_by_id, "stochastic": [i for i, kept in enumerate(keep or []) if not kept],
                "updated": updated, "draws": draws, "no_gradient": no_gradient[-1] if no_gradient else "",
                # drew from samplers tern cannot inject, yet gave the same outputs twice (a
                # categorical over one dominant logit): other inputs may not, so none are probed
                "opaque_draws": other_draws, "samples": samples,
                # without the draws, which outputs depend on them: those that differed between the two
                # runs, or all of them when both runs drew alike (an RNG state restored between them)
                "sampled": ([i for i, kept in enumerate(same) if not kept] if not all(same) else list(range(len(same))))
                           if draws else []}

    def _sample(self, run: Any, restore: Any, leaves: list, sampled: list[int], seconds_per_run: float) -> dict | None:
        """The sampled outputs (positions ``sampled`` among the leaves) over fresh runs of the
        call, ``{"leaves": sampled, "runs": [(runs, *shape) per output]}`` for the replay to
        compare as distributions (``distributions.py``); None when too few runs are affordable,
        an output is not numeric, or a run changes the outputs' structure or shapes. The RNG
        state advances between runs; every variable is restored after."""
        tf = _tf()
        if any(np.asarray(leaves[i]).dtype.kind not in "fiub" for i in sampled):
            return None
        runs = affordable_runs(seconds_per_run, [int(np.size(leaves[i])) for i in sampled])
        if not runs:
            return None
        kept: list[list[np.ndarray]] = []
        try:
            for _ in range(runs):
                again = tf.nest.flatten(run(None, False)[0])
                restore(advance_rng=True)
                if len(again) != len(leaves) or any(np.shape(again[i]) != np.shape(leaves[i]) for i in sampled):
                    return None  # data-dependent shapes: no two runs to set side by side
                kept.append([np.asarray(again[i]) for i in sampled])
        finally:
            restore()
        return {"leaves": sampled, "runs": [np.stack([one[k] for one in kept]) for k in range(len(sampled))]}

    def _with_draws(self, run: Any, restore: Any, first: tuple, draws: list, other: int) -> tuple | None:
        """The call once more with ``draws`` (the first run's) handed back to TF, under a
        gradient tape: its run when that reproduces the first run's outputs, else None
        (draws of kinds tern cannot inject, or randomness that is not TF's samplers)."""
        if not draws or other:
            return None
        try:
            with self.draw_tape.replaying(draws):
                again = run(None, True)
        except DrawsDoNotLineUp:
            return None
        finally:
            restore()
        return again if _same_outputs(again[0], first[0]) else None


_MISSING = object()
_NOT_RECORDED = object()  # the test's own call gave no case: nothing to tell the other mode from


def _same_outputs(a: Any, b: Any) -> bool:
    tf = _tf()
    left, right = tf.nest.flatten(a), tf.nest.flatten(b)
    return len(left) == len(right) and all(np.shape(x) == np.shape(y) and np.array_equal(x, y, equal_nan=True)
                                           for x, y in zip(left, right))


def _never(value: Any) -> None:
    return None


def _built_by_package(value: Any) -> dict | None:
    """How a layer given to a constructor or factory was built, when the package built it
    from arguments the recorder could keep (``VAE(make_encoder(2), make_decoder(2))``): the
    replay builds the translated one the same way. Its weights come with the outer layer's."""
    origin = getattr(value, "__dict__", {}).get("_tern_origin")
    return origin if isinstance(origin, dict) and "unpackable" not in origin else None


def _model_bases(layer_bases: list[type]) -> list[type]:
    """The Keras model classes whose ``fit`` the tests may call: Keras 3's, and legacy
    Keras 2's when its layers are recorded."""
    import keras

    found = [keras.Model]
    found += [b for b in layer_bases if b.__name__ == "Model" and b.__module__.startswith("tf_keras") and b not in found]
    return found


def _first_samples(x: Any) -> Any:
    """The first ``TRAINED_SAMPLES`` samples of ``fit``'s ``x`` when it is an array, a tensor,
    or a list, tuple or dict of them (several inputs); None for anything else (a dataset, a
    generator): reading it would change what the test reads next."""
    if isinstance(x, dict):
        parts = {k: _first_samples(v) for k, v in x.items()}
        return parts if parts and all(v is not None for v in parts.values()) else None
    if isinstance(x, (list, tuple)):
        parts = [_first_samples(v) for v in x]
        return parts if parts and all(v is not None for v in parts) else None
    if not isinstance(x, np.ndarray) and not (hasattr(x, "numpy") and hasattr(x, "dtype") and hasattr(x, "shape")):
        return None
    if not len(getattr(x, "shape", ())) or not x.shape[0]:
        return None
    return _as_np(x[:TRAINED_SAMPLES])  # sliced first: a tensor is copied whole by ``numpy()``


def _as_np(value: Any) -> np.ndarray:
    array = to_numpy(value)
    return np.asarray(value) if array is None else array


def _target(origin: dict) -> str:
    return f"{origin['module']}:{origin['name']}"


def _cotangents(leaves: list) -> list:
    """A fixed random cotangent per float output (None for ints/bools)."""
    tf = _tf()
    rng = np.random.default_rng(COTANGENT_SEED)
    result = []
    for leaf in leaves:
        dtype = np.dtype(leaf.dtype.as_numpy_dtype) if hasattr(leaf.dtype, "as_numpy_dtype") else np.asarray(leaf).dtype
        if dtype.kind != "f":
            result.append(None)
            continue
        result.append(tf.constant(rng.standard_normal(tuple(leaf.shape)).astype(np.float32)))
    return result


def _pack_units(layer: Any, value_of: Any) -> tuple[list[dict], list[np.ndarray]]:
    arrays: list[np.ndarray] = []
    units = keras_units(layer, value_of)
    return [{**u, "tree": pack(u["tree"], arrays)} for u in units], arrays


def package_modules(root: Path, package: str) -> list[str]:
    """Importable names of the package's non-test modules."""
    names = []
    for path in sorted((root / package).rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        if is_test_file(path) or is_generated(path):  # tern's support copy: checked where it is written
            continue
        names.append(".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts))
    return names


def imported_modules(test_path: Path, root: Path, package: str, modules: list[str]) -> list[str]:
    """The package modules ``test_path`` imports directly, in import order (absolute and
    relative imports; ``from pkg import mod`` names the module ``pkg.mod``)."""
    import ast

    from tern.engine.parsed_files import parsed_file

    try:
        tree = parsed_file(test_path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return []
    here = list(test_path.relative_to(root).with_suffix("").parts[:-1])
    found: list[str] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            prefix = ".".join([*base, *(node.module.split(".") if node.module else [])])
            names = [prefix, *(f"{prefix}.{a.name}" for a in node.names)]
        found.extend(n for n in names if n in modules and n != package and n not in found)
    return found


def is_test_file(path: Path) -> bool:
    stem = path.stem
    return stem.startswith("test_") or stem.endswith("_test") or stem == "conftest"


def layer_bases(keras_flavour: str) -> list[type]:
    """The Keras layer bases whose calls are recorded: the configured Keras's, and legacy
    Keras 2's too when the package imported ``tf_keras`` itself (a Keras 3 project whose
    random layers subclass ``tf_keras`` bases)."""
    import sys

    if keras_flavour == "tf_keras" or "tf_keras" in sys.modules:
        import tf_keras

        legacy = [tf_keras.layers.Layer, tf_keras.Model]
        if keras_flavour == "tf_keras":
            return legacy
    else:
        legacy = []
    import keras

    return [keras.layers.Layer, *legacy]


def record_tests(payload: dict, scratch: Path) -> dict:
    """Task: run ``payload["tests"]`` (paths under ``payload["root"]``) with pytest while
    recording calls of ``payload["package"]``'s layers into ``scratch / OUTPUT``, which the
    sandbox moves to the job's ``output`` afterwards (jobs never write tern's state).

    Returns the original tests' outcomes, the recorded cases and what was skipped."""
    root, package, out = Path(payload["root"]), payload["package"], scratch / OUTPUT
    recorder = Recorder(out, payload.get("max_per_target", 3))
    modules, import_errors = [], {}
    for name in package_modules(root, package):
        try:
            modules.append(importlib.import_module(name))
        except BaseException:  # noqa: BLE001 - report, record the rest
            import_errors[name] = traceback.format_exc(limit=3)
    recorder.install(modules, layer_bases(payload.get("keras", "keras3")))
    _sorted_top_k(recorder)
    steps = StepRecorder(out, payload.get("train_steps", 3), payload.get("max_per_target", 3))
    steps.install(modules)
    try:
        with recorder.draw_tape.installed():
            for case in payload.get("config_cases", []):
                _run_config_case(case, recorder)
            tests = (run_pytest([str(root / t) for t in payload.get("tests", [])], root, scratch)
                     if payload.get("tests") else {})
            recorder.record_trained()
            recorder.record_variants()
            recorder.record_config_variants()
    finally:
        steps.close()
        recorder.close()
    steps.finish()  # after the tests and with every patch undone: the copies it runs change nothing they saw
    return {"tests": tests, "cases": recorder.cases, "skipped": recorder.skipped, "import_errors": import_errors,
            "steps": steps.cases, "steps_not_compared": steps.not_compared}


def _sorted_top_k(recorder: Recorder) -> None:
    """TF's unspecified orders sorted while the tests run (``tf_orders``)."""
    for owner, name, value in sorted_patches():
        recorder._patch(owner, name, value)


def _run_config_case(case: dict, recorder: Recorder) -> None:
    """Build the layer a ``[tool.tern.verify]`` case names and call it on seeded inputs."""
    module_name, _, attr = case["target"].partition(":")
    target = getattr(importlib.import_module(module_name), attr)
    layer = target(*case.get("args", []), **case.get("kwargs", {}))
    rng = np.random.default_rng(case.get("seed", 0))
    inputs = []
    for spec in case.get("inputs", []):
        dtype = np.dtype(spec.get("dtype", "float32"))
        shape = tuple(spec["shape"])
        inputs.append(rng.standard_normal(shape).astype(dtype) if dtype.kind == "f"
                      else rng.integers(0, spec.get("high", 10), shape).astype(dtype))
    kwargs = {"training": case["training"]} if "training" in case else {}
    layer(*inputs, **kwargs)


def _factory(origin: dict) -> Any:
    """The package function that built a recorded model, if one did (None for a class)."""
    if origin.get("kind") != "factory":
        return None
    try:
        return origin_target(origin)
    except (ImportError, AttributeError):
        return None
