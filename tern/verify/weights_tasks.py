"""Sandbox tasks of ``tern weights``: Keras weights out (TF worker), Flax variables in (JAX worker).

``export_keras`` builds or loads the original model from a saved source, calls it on
seeded inputs and writes one case (``arrays.write_case``): how to construct the model
again, its variables as ported units (``port.py``), the inputs and the Keras outputs.
``port_to_flax`` constructs the translated module the same way, grafts the units into
its ``init`` tree (``graft.py``), saves the tree with orbax and replays the inputs.

Both return ``{"outcome": "ok" | "usage" | "problem", ...}``: a bad request and a port
that cannot be made are outcomes with a one-line ``message``, not exceptions. Inside, a
step that cannot go on returns a ``Stop`` and its caller passes it up.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tern.verify.arrays import array_paths, pack, read_case, unpack, write_case

INPUT_SEED = 0
BASE_CONFIG_KEYS = {"name", "trainable", "dtype"}  # what keras.Layer's own **kwargs take back


@dataclass(frozen=True)
class Stop:
    """Why a task ends early: ``kind`` "usage" (a bad request) or "problem" (a port that
    cannot be made), and the one line that says so."""

    kind: str
    message: str

    def answer(self, prefix: str = "") -> dict:
        return {"outcome": self.kind, "message": prefix + self.message}


def _last_line(exc: BaseException) -> str:
    text = " ".join(line.strip() for line in f"{type(exc).__name__}: {exc}".splitlines() if line.strip())
    return text[:400] + (" ..." if len(text) > 400 else "")


def _target(module: str, name: str) -> Any:
    """The object ``module:name`` names, or a Stop."""
    try:
        obj = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - a missing module is bad usage; anything else, the package's failure
        if isinstance(exc, ModuleNotFoundError) and exc.name and f"{module}.".startswith(f"{exc.name}."):
            return Stop("usage", f"--model: no module {module}")
        return Stop("problem", f"importing {module}: {_last_line(exc)}")
    for part in name.split("."):
        if not hasattr(obj, part):
            return Stop("usage", f"--model: {module} has no {name}")
        obj = getattr(obj, part)
    return obj


# -- TF side -------------------------------------------------------------------------


def _package_objects(root: Path, package: str) -> dict[str, Any]:
    """The package's classes and functions by name: ``load_model``'s ``custom_objects``."""
    from tern.verify.record import package_modules

    objects: dict[str, Any] = {}
    for name in package_modules(root, package):
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module the saved model does not need
            continue
        for attr, value in vars(module).items():
            if getattr(value, "__module__", None) == name and (isinstance(value, type) or callable(value)):
                objects.setdefault(attr, value)
    return objects


def _config_origin(source: Path, model: Any, package: str) -> dict | Stop:
    """The class and constructor keywords a ``.keras`` file rebuilt its model with, when
    ``load_model`` called ``cls(**config)`` on plain values (so they rebuild it exactly)."""
    from tensorflow import keras  # Keras 3, or tf_keras in a tf_keras worker

    cls = type(model)
    where = f"{source.name} holds a {cls.__module__}.{cls.__qualname__}"
    if not cls.__module__.startswith(package + ".") and cls.__module__ != package:
        return Stop("usage", f"{where}, not a class of {package}: pass --model")
    if getattr(cls.from_config, "__func__", None) is not keras.Model.from_config.__func__:
        return Stop("usage", f"{where} with its own from_config: pass --model and its arguments")
    config = _saved_config(source)
    params = inspect.signature(cls.__init__).parameters
    kwargs = {k: v for k, v in config.items() if k not in BASE_CONFIG_KEYS}
    odd = [k for k, v in kwargs.items() if k not in params or not _plain(v)]
    if odd:
        return Stop("usage", f"{where} whose config has {odd} (not plain constructor arguments): pass --model")
    tuples = {k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()}
    return {"kind": "class", "module": cls.__module__, "name": cls.__qualname__,
            "args": [], "kwargs": pack(tuples, [])}


def _saved_config(source: Path) -> dict | None:
    """The model config of a full-model file (``.keras`` zip, legacy HDF5); None for weights only."""
    if zipfile.is_zipfile(source):
        return json.loads(zipfile.ZipFile(source).read("config.json"))["config"]
    import h5py

    with h5py.File(source, "r") as f:
        return json.loads(f.attrs["model_config"])["config"] if "model_config" in f.attrs else None


def _plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _declared_inputs(model: Any) -> list:
    """A functional or Sequential model's ``Input`` tensors (a subclassed model has none)."""
    try:
        return list(model.inputs or [])
    except (AttributeError, ValueError, TypeError):
        return []


def _example_inputs(model: Any, specs: list[dict]) -> list[np.ndarray] | Stop:
    """Seeded inputs of the given shapes, else of the model's own (``Input`` or build) shapes."""
    if not specs:
        specs = [{"shape": list(t.shape), "dtype": str(t.dtype)} for t in _declared_inputs(model)]
        if not specs:
            shape = (model.get_build_config() or {}).get("input_shape") if hasattr(model, "get_build_config") else None
            if isinstance(shape, (list, tuple)) and all(d is None or isinstance(d, int) for d in shape):
                specs = [{"shape": list(shape), "dtype": "float32"}]
    if not specs:
        return Stop("usage", f"{type(model).__name__} declares no input shape: pass --input-shape (e.g. 2,12)")
    rng = np.random.default_rng(INPUT_SEED)
    inputs = []
    for spec in specs:
        shape = tuple(2 if i == 0 and d is None else d for i, d in enumerate(spec["shape"]))
        if any(d is None for d in shape):
            return Stop("usage", f"input shape {spec['shape']} has unknown dimensions: pass --input-shape")
        dtype = np.dtype(spec["dtype"])
        inputs.append(rng.standard_normal(shape).astype(dtype) if dtype.kind == "f"
                      else rng.integers(0, 10, shape).astype(dtype))
    return inputs


def _call(model: Any, inputs: list[np.ndarray]) -> tuple[list, Any] | Stop:
    """A functional/Sequential model with several inputs takes them as one list."""
    several = len(inputs) > 1 and len(_declared_inputs(model)) > 1
    args = [list(inputs)] if several else list(inputs)
    try:
        return args, model(*args, training=False)
    except Exception as exc:  # noqa: BLE001 - most often inputs of the wrong shape
        shapes = ", ".join(str(list(x.shape)) for x in inputs)
        return Stop("problem", f"calling {type(model).__name__} on inputs {shapes}: {_last_line(exc)}")


def _trackable_paths(root: Any) -> dict[int, tuple[Any, set[str]]]:
    """Every variable reachable from ``root`` through tracked attributes: id -> (variable, paths)."""
    import tensorflow as tf

    view = tf.train.TrackableView(root)
    found: dict[int, tuple[Any, set[str]]] = {}
    queue, seen = [(root, "")], {id(root)}
    while queue:
        obj, prefix = queue.pop(0)
        for name, child in view.children(obj).items():
            path = f"{prefix}/{name}" if prefix else name
            if isinstance(child, tf.Variable) or (hasattr(child, "assign") and hasattr(child, "shape")):
                found.setdefault(id(child), (child, set()))[1].add(path)
            elif id(child) not in seen:
                seen.add(id(child))
                queue.append((child, path))
    return found


def _restore_savedmodel(model: Any, source: Path) -> Stop | None:
    """Each model variable takes the SavedModel variable at the same attribute path, of
    the same shape and dtype; anything else (ambiguous, missing, left over) is a problem."""
    import tensorflow as tf

    mine, theirs = _trackable_paths(model), _trackable_paths(tf.saved_model.load(str(source)))
    problems, used, overlap = [], set(), False
    for variable in model.weights:
        paths = mine.get(id(variable), (None, set()))[1]
        hits = [v for v, p in theirs.values() if paths & p]
        fit = [v for v in hits if tuple(v.shape) == tuple(variable.shape) and v.dtype == variable.dtype]
        overlap = overlap or bool(hits)
        if len(fit) == 1 and id(fit[0]) not in used:
            used.add(id(fit[0]))
            variable.assign(fit[0].numpy())
            continue
        have = ", ".join(f"{v.dtype.name}{list(v.shape)}" for v in hits) or "nothing"
        problems.append(f"{min(paths, default=variable.path)} {variable.dtype}{list(variable.shape)}: "
                        + ("ambiguous (several variables fit, or one fits two)" if fit else f"SavedModel has {have} there"))
    left = sorted(min(p) for v, p in theirs.values() if id(v) not in used and not all(x.startswith("optimizer/") for x in p))
    if left:
        problems.append(f"SavedModel variables the model has no place for: {', '.join(left[:6])}")
    if problems and not overlap:
        problems.append("no variable matched by attribute path (a model.export() archive? "
                        "save with tf.saved_model.save(model, DIR) or model.save_weights)")
    if problems:
        return Stop("problem", "SavedModel: " + "; ".join(problems))
    return None


def _restore_checkpoint(model: Any, source: Path) -> str | Stop:
    """The note saying which checkpoint was read, or a Stop."""
    import tensorflow as tf

    prefix = tf.train.latest_checkpoint(str(source)) if source.is_dir() else str(source)
    if prefix is None:
        indexes = sorted(source.glob("*.index"))
        if len(indexes) != 1:
            return Stop("usage", f"{source}: {len(indexes)} checkpoints and no 'checkpoint' file: pass the prefix")
        prefix = str(indexes[0].with_suffix(""))
    tops = {k.split("/")[0] for k, _ in tf.train.list_variables(prefix)}
    tops -= {"_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter", "optimizer"}
    key = "model" if "model" in tops else next(iter(tops)) if len(tops) == 1 else None
    checkpoint = tf.train.Checkpoint(**{key: model}) if key else tf.train.Checkpoint(model)
    try:
        status = checkpoint.read(prefix)
        status.assert_existing_objects_matched()
    except AssertionError as exc:  # TF lists the unmatched objects with their values: keep the paths
        paths = re.findall(r"path=([^\s,]+)", str(exc))
        return Stop("problem", f"checkpoint {prefix}: no values for model variables "
                               f"{', '.join(paths[:6]) or _last_line(exc)}")
    except Exception as exc:  # noqa: BLE001 - shapes that differ, a file TF cannot read
        return Stop("problem", f"checkpoint {prefix}: {_last_line(exc)}")
    status.expect_partial()
    return f"checkpoint {prefix}" + (f" (root object {key!r})" if key else " (model at the root)")


@dataclass(frozen=True)
class Loaded:
    """The original model built with the source's weights, how to construct it again
    (``origin``), its seeded inputs, and a note on where its arguments came from."""

    model: Any
    origin: dict
    inputs: list[np.ndarray]
    note: str


def _load(payload: dict) -> Loaded | Stop:
    from tensorflow import keras  # Keras 3, or tf_keras in a tf_keras worker

    source, fmt, spec = Path(payload["source"]), payload["format"], payload.get("model")
    specs = payload.get("inputs", [])
    target = _target(spec["module"], spec["name"]) if spec else None
    if isinstance(target, Stop):
        return target
    args, kwargs = unpack(payload.get("args", []), []), unpack(payload.get("kwargs", {}), [])
    origin = spec and {"kind": "class" if isinstance(target, type) else "factory", **spec,
                       "args": payload.get("args", []), "kwargs": payload.get("kwargs", {})}
    note = ""
    if fmt == "keras" or (fmt == "h5" and _saved_config(source) is not None):
        custom = _package_objects(Path(payload["root"]), payload["package"])
        try:
            model = keras.models.load_model(str(source), custom_objects=custom, compile=False)
        except Exception as exc:  # noqa: BLE001 - keras raises anything on a file it cannot rebuild
            return Stop("problem", f"keras could not load {source.name}: {_last_line(exc)}")
        if origin is None or (target is type(model) and not (payload.get("args") or payload.get("kwargs"))):
            # no --model, or it names the saved class: the file's arguments, when they can be known
            found = _config_origin(source, model, payload["package"])
            if not isinstance(found, Stop):
                origin, note = found, "constructor arguments from the file's config"
            elif origin is None:
                return found
        inputs = _example_inputs(model, specs)
        return inputs if isinstance(inputs, Stop) else Loaded(model, origin, inputs, note)
    if target is None:
        return Stop("usage", f"a {fmt} source holds weights only: pass --model pkg.module:Name")
    try:
        model = target(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the user's constructor
        return Stop("usage", f"--model {spec['module']}:{spec['name']}(...) failed: {_last_line(exc)}")
    inputs = _example_inputs(model, specs)
    if isinstance(inputs, Stop):
        return inputs
    built = _call(model, [np.zeros_like(x) for x in inputs])  # builds every variable
    if isinstance(built, Stop):
        return built
    if fmt == "checkpoint":
        note = _restore_checkpoint(model, source)
        if isinstance(note, Stop):
            return note
    elif fmt == "savedmodel":
        stop = _restore_savedmodel(model, source)
        if stop is not None:
            return stop
    else:
        try:
            model.load_weights(str(source))
        except Exception as exc:  # noqa: BLE001 - a file that does not fit the model
            return Stop("problem", f"loading {source.name} into {spec['name']}: {_last_line(exc)}")
    return Loaded(model, origin, inputs, note)


def export_keras(payload: dict, scratch: Path) -> dict:
    """Task (TF worker): load ``payload["source"]`` into the original model and write
    the case ``payload["out"]/case``."""
    from tern.verify.port import PortError, keras_units
    from tern.verify.record import to_numpy

    loaded = _load(payload)
    if isinstance(loaded, Stop):
        return loaded.answer()
    model, origin, inputs, note = loaded.model, loaded.origin, loaded.inputs, loaded.note
    called = _call(model, inputs)
    if isinstance(called, Stop):
        return called.answer()
    args, outputs = called
    try:
        units = keras_units(model)
    except (PortError, KeyError) as exc:
        return Stop("problem", f"porting the Keras variables: {_last_line(exc)}").answer()
    arrays: list[np.ndarray] = []
    meta = {"origin": origin, "inputs": pack([args, {"training": False}], arrays, to_numpy),
            "outputs": pack(outputs, arrays, to_numpy),
            "units": [{**u, "tree": pack(u["tree"], arrays)} for u in units]}
    write_case(Path(payload["out"]), "case", meta, arrays)
    return {"outcome": "ok", "origin": origin, "note": note, "layer": type(model).__name__,
            "keras_variables": len(model.weights), "inputs": [{"shape": list(x.shape), "dtype": x.dtype.name} for x in inputs]}


# -- JAX side ------------------------------------------------------------------------


def port_to_flax(payload: dict, scratch: Path) -> dict:
    """Task (JAX worker): graft the case's units into the translated module's variables,
    save them with orbax at ``payload["checkpoint"]``, replay and compare."""
    import jax

    from tern.verify.arrays import build
    from tern.verify.graft import graft
    from tern.verify.replay import call_kwargs
    from tern.verify.tolerance import compare
    from tern.weights.checkpoint import describe, save_variables

    meta, arrays = read_case(Path(payload["case"]), "case")
    origin = meta["origin"]
    found = _target(origin["module"], origin["name"])
    if isinstance(found, Stop):
        return found.answer("the translation: ")
    try:
        module = build(origin, arrays)
        args, kwargs = unpack(meta["inputs"], arrays, jax.numpy.asarray)
        kwargs = call_kwargs(module, kwargs)
        rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
        abstract = jax.eval_shape(lambda a: module.init(rngs, *a, **kwargs), args)
    except Exception as exc:  # noqa: BLE001 - the translated module's own failure
        return {"outcome": "problem", "message": f"building the translated {origin['name']}: {_last_line(exc)}"}
    init = jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), dict(abstract))
    variables, problems = graft(init, [{**u, "tree": unpack(u["tree"], arrays)} for u in meta["units"]])
    if problems:
        return {"outcome": "problem", "message": "weights do not fit the translation", "problems": problems}
    try:
        got = jax.jit(lambda v, a: module.apply(v, *a, **kwargs))(variables, args)
    except Exception as exc:  # noqa: BLE001 - the translated module's own failure
        return {"outcome": "problem", "message": f"applying the translated {origin['name']}: {_last_line(exc)}"}
    want = array_paths(meta["outputs"])
    got_leaves = jax.tree_util.tree_leaves(got)
    if len(got_leaves) != len(want):
        checks = [{"name": "outputs", "ok": False, "problem": f"{len(got_leaves)} outputs, keras gave {len(want)}"}]
    else:
        checks = [compare(path, g, arrays[f"a{i}"], payload.get("tolerance")) for (path, i), g in zip(want, got_leaves)]
    save_variables(Path(payload["checkpoint"]), variables)
    return {"outcome": "ok", "variables": describe(variables), "outputs": checks}

