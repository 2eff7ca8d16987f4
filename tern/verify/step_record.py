"""TF worker: record the training steps (``step_find.py``) the original tests call, as
sessions the JAX side replays on the translated step (``step_replay.py``).

The step functions are patched in every package module that holds them, so calls through
the package's own loops (``train()`` calling the module global) are seen too. A *session*
starts at the first call with a given model and optimizer when the model was built by a
package class or factory (as for forward replays), has weights already, holds no dropout
or noise layer with a nonzero rate, the optimizer is a Keras built-in whose ``iterations``
is 0, and every other argument can be recorded (arrays, scalars, Keras loss objects as
class + config). The initial weights are snapshotted then, and the arguments of the
test's first N calls with that pair are kept. Nothing here builds a Keras object while the
tests run: the test sees what it would have seen without the recorder.

After the tests, ``step_copies.py`` runs each session on copies and writes its case.

Keras ``fit`` on a package's model (from the package or its tests) is noted as training not
compared, under ``module:Class.fit``: the translation trains it on KerasTrainer, which this
replay does not run.

A model with dropout or noise layers (``step_copies.random_layer``) draws in every training step: its
session runs with TF's draws recorded and handed to the translation (``step_copies.py``),
as a step that calls ``tf.random`` does.
"""

from __future__ import annotations

import inspect
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tern.verify.arrays import Unpackable, pack, write_case
from tern.verify.passes import MAX_BYTES, RecordingPasses
from tern.verify.port import keras_units
from tern.verify.step_copies import as_numpy, run_session
from tern.verify.step_find import Step, find_steps
from tern.verify.step_objects import NotRenderable, keras_class, keras_source
from tern.weights.port import variable_path

_INHERITED = object()  # an attribute the class inherits: undone by deleting the patch
FIT_NOT_COMPARED = ("Keras fit (through the model's train_step override, if it has one) runs on KerasTrainer in the "
                    "translation; the training replay runs GradientTape step functions only (tests/test_keras_trainer.py "
                    "compares KerasTrainer.fit with Keras: losses, metrics, History, weights)")


def _fit_target(model: Any, names: set[str]) -> str | None:
    """``module:Class.fit`` for a fit called from a package module or from the tests of one
    (``model_test`` / ``test_model`` -> ``model``), whichever the call stack meets first."""
    frame = inspect.currentframe()
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        parent, _, leaf = name.rpartition(".")
        subject = leaf.removesuffix("_test") if leaf.endswith("_test") else leaf.removeprefix("test_")
        for candidate in (name, f"{parent}.{subject}" if parent else subject):
            if candidate in names:
                return f"{candidate}:{type(model).__name__}.fit"
        frame = frame.f_back
    return None


def _tf():
    import tensorflow as tf

    return tf


def _python_function(fn: Any) -> Any:
    """The plain function under a ``tf.function`` and tern's own wrappers."""
    for _ in range(8):
        inner = getattr(fn, "__wrapped__", None) or getattr(fn, "python_function", None)
        if inner is None or inner is fn:
            return fn
        fn = inner
    return fn


def _is_tf_function(fn: Any) -> bool:
    """Whether ``fn``, under any wrappers, is a ``tf.function`` (its Python loops are traced)."""
    for _ in range(8):
        if hasattr(fn, "python_function"):
            return True
        inner = getattr(fn, "__wrapped__", None)
        if inner is None or inner is fn:
            return False
        fn = inner
    return False


@dataclass
class Role:
    """One (model, optimizer) pair of a step: a single-state step has one, a GAN's step two."""

    model_param: str
    optimizer_param: str
    model: Any
    optimizer: Any
    origin: dict
    optimizer_source: str
    optimizer_config: dict  # at the first call (a test may change the learning rate later)
    weights: list[np.ndarray]  # Keras values before the first step, in ``model.weights`` order
    names: list[str]
    trainable: list[bool]
    build_config: dict | None
    units: list[dict]
    name_units: list[dict]  # each Keras variable as its index, ported: which Flax leaf holds which variable
    first_after: list[np.ndarray] | None = None


@dataclass
class Session:
    step: Step
    target: str
    inner: Any  # the step as the module held it (``tf.function``)
    signature: inspect.Signature
    roles: list[Role]
    calls: list[inspect.BoundArguments] = field(default_factory=list)
    packed: list[dict] = field(default_factory=list)  # per call: the recorded non-model arguments
    first_result: Any = None
    stepped: bool = False  # the test's first step returned
    passes: dict[str, RecordingPasses] = field(default_factory=dict)  # a loop's datasets, recorded as it iterates

    @property
    def origin(self) -> dict:
        return self.roles[0].origin


class StepRecorder:
    def __init__(self, out: Path, steps: int = 3, max_per_target: int = 3):
        self.out = out
        self.steps = steps
        self.max_per_target = max_per_target
        self.sessions: list[Session] = []
        self.pairs: dict[tuple[int, int], Session | None] = {}
        self.alive: list[Any] = []  # models and optimizers seen, kept so their ids stay theirs
        self.not_compared: dict[str, dict[str, int]] = {}  # target -> reason -> count
        self.cases: list[dict] = []
        self._undo: list[tuple[Any, str, Any]] = []

    # -- patching ---------------------------------------------------------------------

    def install(self, modules: list[Any]) -> None:
        for module in modules:
            path = getattr(module, "__file__", None)
            if not path or not Path(path).is_file():
                continue
            for step in find_steps(Path(path).read_text(encoding="utf-8")):
                original = getattr(module, step.name, None)
                if original is None:
                    continue
                target = f"{module.__name__}:{step.name}"
                for holder in modules:
                    for attr, value in list(vars(holder).items()):
                        if value is original or getattr(value, "__wrapped__", None) is original:
                            self._undo.append((holder, attr, value))
                            setattr(holder, attr, _StepCall(self, step, target, value))
        self._watch_fit({module.__name__ for module in modules})

    def _watch_fit(self, names: set[str]) -> None:
        """Note Keras ``fit`` calls on the package's models: training the replay does not compare."""
        try:
            import keras
        except ImportError:
            return
        original = keras.Model.fit
        recorder = self

        def fit(model, *args, **kwargs):
            target = _fit_target(model, names)
            if target is not None and FIT_NOT_COMPARED not in recorder.not_compared.get(target, {}):
                recorder.note(target, FIT_NOT_COMPARED)
            return original(model, *args, **kwargs)

        self._undo.append((keras.Model, "fit", original if "fit" in vars(keras.Model) else _INHERITED))
        keras.Model.fit = fit

    def close(self) -> None:
        for holder, attr, value in reversed(self._undo):
            if value is _INHERITED:
                delattr(holder, attr)
            else:
                setattr(holder, attr, value)
        self._undo.clear()

    # -- observing the test's calls ---------------------------------------------------

    def note(self, target: str, reason: str) -> None:
        bucket = self.not_compared.setdefault(target, {})
        bucket[reason] = bucket.get(reason, 0) + 1

    def observe(self, step: Step, target: str, inner: Any, args: tuple, kwargs: dict) -> Session | None:
        """The new session this call starts (its result is then snapshotted), else None.

        Reasons are counted once per session (model and optimizer pair), and once per
        step function for a step tern does not translate."""
        tf = _tf()
        if step.unsupported:
            if step.unsupported not in self.not_compared.get(target, {}):
                self.note(target, step.unsupported)
            return None
        signature = inspect.signature(_python_function(inner))
        bound = signature.bind(*args, **kwargs)
        pairs = [(bound.arguments.get(m), bound.arguments.get(o)) for m, o in step.pairs]
        key = (target, *(id(x) for pair in pairs for x in pair))  # a loop and the step it calls: two sessions
        if not tf.executing_eagerly():
            if key not in self.pairs:
                self.pairs[key] = None
                self.alive += [x for pair in pairs for x in pair]
                self.note(target, "called inside a traced tf.function")
            return None
        if key in self.pairs:
            session = self.pairs[key]
            if session is not None and len(session.calls) < self._calls(step):
                packed = self._pack_arguments(session.step, bound)
                if isinstance(packed, str):  # a later call with an argument the first did not have
                    return self.note(target, packed)
                session.calls.append(bound)
                session.packed.append(packed)
            return None
        self.pairs[key] = None
        self.alive += [x for pair in pairs for x in pair]
        reason = next(filter(None, (self._ineligible(model, optimizer, step.builds) for model, optimizer in pairs)), "")
        if reason:
            return self.note(target, reason)
        if sum(1 for s in self.sessions if s.target == target) >= self.max_per_target:
            return None
        packed = self._pack_arguments(step, bound)
        if isinstance(packed, str):
            return self.note(target, packed)
        roles = []
        for (model_param, optimizer_param), (model, optimizer) in zip(step.pairs, pairs):
            if step.builds:
                roles.append(_role(model_param, optimizer_param, model, None, "", {}))
                continue
            try:
                optimizer_source, optimizer_config = keras_source(optimizer, "optimizer")
            except NotRenderable as exc:
                return self.note(target, f"optimizer: {exc}")
            roles.append(_role(model_param, optimizer_param, model, optimizer, optimizer_source, optimizer_config))
        session = Session(step=step, target=target, inner=inner, signature=signature, roles=roles,
                          calls=[bound], packed=[packed])
        for name, entry in packed.items():
            if "passes" in entry:
                if _is_tf_function(inner):
                    return self.note(target, f"argument {name!r}: a dataset iterated inside a tf.function loop")
                session.passes[name] = RecordingPasses(bound.arguments[name], _element_as_numpy, _nbytes)
        self.pairs[key] = session
        self.sessions.append(session)
        return session

    def _calls(self, step: Step) -> int:
        """Calls a session keeps: N steps, or a loop's first call (it runs many steps itself)."""
        return 1 if step.loop else self.steps

    def _ineligible(self, model: Any, optimizer: Any, builds: bool = False) -> str:
        origin = getattr(model, "__dict__", {}).get("_tern_origin")
        if origin is None:
            return "the model is not built by a package class or factory (the replay could not rebuild it)"
        if "unpackable" in origin:
            return origin["unpackable"]
        if builds:  # the loop makes its optimizer: a fresh one, whatever the test did before
            return "" if model.weights else "the model has no weights before its first step (it is built inside the step)"
        if keras_class(optimizer, "optimizers") is None:
            return f"the optimizer ({type(optimizer).__name__}) is not a Keras built-in optimizer"
        iterations = int(np.asarray(optimizer.iterations))
        if iterations:
            return f"the optimizer had already taken {iterations} step(s) at the first call seen (iterations = {iterations})"
        if not model.weights:
            return "the model has no weights before its first step (it is built inside the step)"
        return ""

    def _pack_arguments(self, step: Step, bound: inspect.BoundArguments) -> dict | str:
        """Every argument but the model and the optimizer, recorded; a reason when one cannot be."""
        packed: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            if any(name in pair for pair in step.pairs):
                continue
            if bound.signature.parameters[name].kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                return f"argument {name!r} is variadic (*args/**kwargs)"
            if keras_class(value, "losses") is not None:
                try:
                    source, config = keras_source(value, "loss")
                    packed[name] = {"__keras_loss__": source, "config": config}
                except NotRenderable as exc:
                    return f"argument {name!r}: {exc}"
                continue
            if name in step.iterated and _is_dataset(value):
                packed[name] = {"passes": True}  # recorded as the loop iterates it (``passes.py``)
                continue
            try:
                packed[name] = {"value": pack(value, arrays := [], as_numpy_or_none), "arrays": arrays}
            except Unpackable as exc:
                return f"argument {name!r}: {exc} (only arrays, scalars and Keras loss objects are recorded)"
        return packed

    def seal(self, session: Session) -> None:
        """After a loop's call: the passes it made over each dataset become its recorded argument."""
        for name, passes in session.passes.items():
            if passes.overflow:
                self.sessions.remove(session)
                return self.note(session.target, f"argument {name!r}: the dataset holds more than "
                                 f"{MAX_BYTES >> 20} MB; a loop's data is recorded whole")
            try:
                arrays: list[np.ndarray] = []
                session.packed[0][name] = {"value": {"__passes__": pack(passes.passes, arrays, as_numpy_or_none)},
                                           "arrays": arrays}
            except Unpackable as exc:
                self.sessions.remove(session)
                return self.note(session.target, f"argument {name!r}: {exc}")

    # -- after the tests ----------------------------------------------------------------

    def finish(self) -> None:
        """Run every session on copies (``step_copies``) and write its case, or note why not."""
        for session in self.sessions:
            try:
                outcome = run_session(session, self._calls(session.step))
            except Exception:  # noqa: BLE001 - one broken session must not lose the others
                outcome = "recorder error: " + traceback.format_exc(limit=2).strip().splitlines()[-1]
            if isinstance(outcome, str):
                self.note(session.target, outcome)
                continue
            meta, arrays = outcome
            write_case(self.out, meta["id"], meta, arrays)
            self.cases.append({"id": meta["id"], "target": session.target, "origin_module": session.origin["module"]})


def _role(model_param: str, optimizer_param: str, model: Any, optimizer: Any, source: str, config: dict) -> Role:
    """A pair as it stands before the first step: weights snapshotted, ported with their names."""
    weights = list(model.weights)
    index = {id(v): i for i, v in enumerate(weights)}
    try:
        build_config = model.get_build_config()
    except Exception:  # noqa: BLE001 - a model without one is rebuilt by its factory alone
        build_config = None
    return Role(model_param=model_param, optimizer_param=optimizer_param, model=model, optimizer=optimizer,
                origin=model.__dict__["_tern_origin"], optimizer_source=source, optimizer_config=config,
                weights=[np.array(v.numpy()) for v in weights], names=[variable_path(v) for v in weights],
                trainable=[bool(v.trainable) for v in weights], build_config=build_config, units=keras_units(model),
                name_units=keras_units(model, lambda v: np.full(v.shape, index.get(id(v), -1), np.float64)))


class _StepCall:
    """The patched step: observes the call, then runs the step as the test asked. Any other
    attribute (``get_concrete_function`` of a ``tf.function``) is the step's own."""

    def __init__(self, recorder: StepRecorder, step: Step, target: str, inner: Any):
        self._recorder, self._step, self._target = recorder, step, target
        self.__wrapped__ = inner

    def __call__(self, *args, **kwargs):
        recorder, inner = self._recorder, self.__wrapped__
        try:
            session = recorder.observe(self._step, self._target, inner, args, kwargs)
        except Exception:  # noqa: BLE001 - the recorder must never fail the user's test
            recorder.note(self._target, "recorder error: " + traceback.format_exc(limit=2).strip().splitlines()[-1])
            session = None
        if session is not None and session.passes:  # the loop iterates the recording stand-ins
            bound = session.calls[0]
            bound = inspect.BoundArguments(bound.signature, {**bound.arguments, **session.passes})
            args, kwargs = bound.args, bound.kwargs
        result = inner(*args, **kwargs)
        if session is not None and session.passes:
            recorder.seal(session)
        if session is not None and not session.stepped:
            session.first_result = _tf().nest.map_structure(as_numpy, result)
            for role in session.roles:
                role.first_after = [np.array(v.numpy()) for v in role.model.weights]
            session.stepped = True
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__wrapped__, name)


def as_numpy_or_none(value: Any) -> np.ndarray | None:
    """For ``pack``: tensors as arrays, None for what is not one."""
    array = as_numpy(value)
    return array if isinstance(array, np.ndarray) else None



def _is_dataset(value: Any) -> bool:
    return any(c.__name__ == "DatasetV2" and c.__module__.startswith("tensorflow") for c in type(value).__mro__)


def _element_as_numpy(element: Any) -> Any:
    """A dataset element (tensors in tuples and dicts) as NumPy, its structure kept."""
    element = _tf().nest.map_structure(as_numpy, element)
    return tuple(element) if isinstance(element, list) else element


def _nbytes(element: Any) -> int:
    return sum(np.asarray(leaf).nbytes for leaf in _tf().nest.flatten(element))
