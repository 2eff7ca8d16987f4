"""JAX worker task: replay recorded Keras calls on the translated Flax modules.

Per case: build the translated module the way the original was built (same class and
constructor arguments, or the same factory call), ``init`` it on the recorded inputs
to learn its variable tree, fill that tree with the Keras weights (``graft.py``), apply
it, and compare outputs with the recorded Keras outputs; for float inputs, compare the
gradients of ``sum(outputs * cotangent)`` with respect to inputs and parameters too.

Comparisons: structure first (same number of outputs, same shapes), then values with
``|jax - keras| <= atol + rtol * |keras|``. The maximum absolute and relative errors
are reported per output whether or not they pass.

Float32 rounding: a gradient is a sum over the batch and every position a weight touches,
and the rounding of a sum grows with its terms, not its result, so an element that
cancels to almost nothing can differ between two correct kernels by far more than
``rtol`` of itself. When a case fails only on values, the translation runs again in
float64 (same weights and inputs): its float32 rounding is measured as
``rounding = max |jax32 - jax64|`` per value, and a value that failed passes when the
Keras result agrees with the float64 one within ``atol + rtol * |keras| + ROUNDING_FACTOR
* rounding``. A wrong translation is as far from Keras in float64 as in float32, so it
still fails; the report keeps both comparisons. A "rounding" beyond ``ROUNDING_CEILING`` of
the values is no rounding (a translation that draws differently in float64, or leaves dropout
on in inference): nothing is excused then.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from tern.status import Status
from tern.verify.arrays import array_paths, origin_target, read_case, unpack
from tern.verify.between_jobs import recorded_case
from tern.verify.distributions import ALPHA, SEED, distribution_check
from tern.verify.draws import DrawsDoNotLineUp, Injector
from tern.verify.graft import DERIVED, flatten, graft
from tern.verify.interface import default_checks
from tern.verify.layer_call import layer_call, ported_variables
from tern.verify.probes import probe_checks
from tern.verify.replay_config import replay_config_case
from tern.verify.replay_functions import replay_function_case
from tern.verify.search import searchable
from tern.verify.tolerance import ROUNDING_CEILING, ROUNDING_FACTOR, compare
from tern.verify.variants import accepts

def call_kwargs(module: Any, kwargs: dict) -> dict:
    """Recorded call keywords the Flax ``__call__`` accepts; a meaningful one it lacks
    (``training=True``, a mask) is an error, ``training=False``/``None`` is the default."""
    params = inspect.signature(type(module).__call__).parameters
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    result = {}
    for key, value in kwargs.items():
        if key in params or accepts_any:
            result[key] = value
        elif key == "training" and not value:
            continue
        elif value is None:
            continue
        else:
            raise TypeError(f"the translated {type(module).__name__}.__call__ has no {key!r} parameter "
                            f"(recorded call passed {key}={'an array' if hasattr(value, 'shape') else repr(value)})")
    return result


def replay_case(directory: Path, name: str, tolerance: dict | None, memory_mb: int = 6144,
                reference: Path | None = None, samples: Path | None = None) -> dict:
    """The case's result, with why it cannot be searched beyond its probes ("" when it can:
    ``search.searchable``), told here where the recording is read anyway, so a cached run
    decides what to search without reading the recording again."""
    meta, arrays = recorded_case(directory, name)
    if meta.get("variant"):
        return _replay_variant(meta, arrays, name, tolerance, memory_mb, reference, samples)
    return {**_replayed(meta, arrays, name, tolerance, memory_mb, reference, samples),
            "not_searchable": searchable(meta, arrays)}


def _replay_variant(meta: dict, arrays: Any, name: str, tolerance: dict | None, memory_mb: int,
                    reference: Path | None, samples: Path | None) -> dict:
    """A layer built in a configuration the tests did not use (``variants.py``): not compared
    when the translation cannot be given the changed parameter (as a function's variant,
    ``replay_functions``); ``raised`` when it fails where Keras ran, a mismatch: the user's
    model in this configuration fails in JAX alone (a weights error stays an error)."""
    variant = meta["variant"]
    param = variant.split("=", 1)[0]
    try:
        maker = origin_target(meta["origin"])
    except Exception:  # noqa: BLE001 - an import that fails is the replay's to report
        maker = None
    base = {"variant": variant, "not_searchable": searchable(meta, arrays)}
    if maker is not None and not accepts(maker, param):
        return {"id": meta["id"], "target": meta["target"], "layer": meta["layer"], "status": Status.NOT_COMPARED,
                **base, "note": f"built with {variant}: the translation has no parameter {param!r}"}
    result = {**_replayed(meta, arrays, name, tolerance, memory_mb, reference, samples), **base}
    note = f"built with {variant} (a configuration beyond the tests')"
    result["note"] = "; ".join(filter(None, [note, result.get("note")]))
    if result["status"] == Status.ERROR and not result.get("message", "").startswith("weights: "):
        result.update(status=Status.MISMATCH, raised=True)
    return result


def _replayed(meta: dict, arrays: Any, name: str, tolerance: dict | None, memory_mb: int,
              reference: Path | None, samples: Path | None) -> dict:
    if meta.get("kind") == "function":
        return replay_function_case(meta, arrays, tolerance)
    if meta.get("kind") == "config":
        return replay_config_case(meta, arrays, tolerance)
    if not meta.get("draws"):
        return _replay_layer(meta, arrays, name, tolerance, memory_mb, reference)
    import jax

    # Jitted functions inside the translation trace once per shape: cleared before, so they
    # trace again with the draws injected, and after, so no later call reuses those draws.
    jax.clear_caches()
    try:
        return _replay_layer(meta, arrays, name, tolerance, memory_mb, reference)
    except DrawsDoNotLineUp as exc:
        jax.clear_caches()
        return _without_draws(meta, arrays, name, tolerance, memory_mb, str(exc), samples)
    finally:
        jax.clear_caches()


def _distribution_checks(meta: dict, arrays: Any, call: Any, variables: dict, want_paths: list) -> tuple[list[dict], int]:
    """The sampled outputs of a call whose draws could not be injected, the translation's runs
    beside Keras's (``distributions.py``)."""
    if meta.get("keras_runs"):  # made on request for a translation that draws otherwise (``sample_calls.py``)
        leaves, keras_runs = meta["keras_runs"]["leaves"], meta["keras_runs"]["runs"]
    else:  # recorded with the call: its draws could not be injected
        leaves, keras_runs = meta["samples"]["leaves"], unpack(meta["samples"]["runs"], arrays)
    got = call.sample_runs(variables, len(keras_runs[0]), SEED)
    return [distribution_check(want_paths[leaf][0], got[leaf], want) for leaf, want in zip(leaves, keras_runs)], len(keras_runs[0])


def _without_draws(meta: dict, arrays: Any, name: str, tolerance: dict | None, memory_mb: int, reason: str,
                   samples: Path | None) -> dict:
    """A case whose draws the translation does not take as Keras made them: its outputs that
    do not depend on the draws are compared (no gradients: Keras's were taken through all
    outputs), and those that do are compared as distributions against Keras's runs
    (``sample_calls.py``), which the result asks for (``wants_samples``) until it has them;
    without runs and with nothing else to compare, the case is not compared, and says why."""
    sampled = meta.get("sampled", [])
    keras_runs = _keras_runs(samples, name)
    note = f"random draws not injected ({reason})"
    if keras_runs is None and len(sampled) >= len(array_paths(meta["outputs"])):
        return {"id": meta["id"], "target": meta["target"], "layer": meta["layer"], "status": Status.NOT_COMPARED,
                "outputs": [], "gradients": [], "note": note + ": every output depends on them, nothing compared",
                **({"wants_samples": True} if samples is None else {})}
    bare = {**meta, "draws": [], "stochastic": sampled, "cotangents": [None] * len(meta["cotangents"]),
            **({"keras_runs": keras_runs} if keras_runs is not None else {})}
    result = _replay_layer(bare, arrays, name, tolerance, memory_mb, None)
    return {**result, "note": "; ".join(filter(None, [note, result.get("note")])),
            **({"wants_samples": True} if samples is None and sampled else {})}


def _keras_runs(samples: Path | None, name: str) -> dict | None:
    """Keras's runs of case ``name`` (``sample_calls.py``), or None when there are none."""
    if samples is None or not (samples / f"{name}.json").exists():
        return None
    meta, arrays = read_case(samples, name)
    return {"leaves": meta["samples"]["leaves"], "runs": [np.asarray(a) for a in unpack(meta["samples"]["runs"], arrays)]}


def _replay_layer(meta: dict, arrays: Any, name: str, tolerance: dict | None, memory_mb: int,
                  reference: Path | None) -> dict:
    import jax
    import jax.numpy as jnp

    result = {"id": meta["id"], "target": meta["target"], "layer": meta["layer"]}
    injector = Injector(meta["draws"], arrays) if meta.get("draws") else None
    try:
        # Eager Flax compiles every primitive on first use (seconds per model on a CPU):
        # the variable tree comes from abstract evaluation (no compile at all), and
        # outputs and gradients from one jitted function, which the workers' persistent
        # compilation cache serves on the next run.
        call = layer_call(meta, arrays, call_kwargs)
        module, floats, rest = call.module, call.floats, call.rest
        try:
            abstract = call.abstract()
        except Exception:  # noqa: BLE001 - TF ran the recorded call eagerly: so does the replay
            # Data-dependent shapes cannot be traced, and a traced call also runs code that eager
            # TF never reached (both branches of a tf.cond guarding an empty tensor); a
            # translation that is wrong fails the eager call as well.
            return _replay_eagerly(result, meta, arrays, module, call.init(floats, rest), call.call_inputs(floats, rest),
                                   call.rngs, tolerance, injector)
        init, variables, problems = ported_variables(abstract, meta, arrays)
        if problems:
            return {**result, "status": Status.ERROR, "message": "weights: " + "; ".join(problems)}
        cots = [c if c is None else jnp.asarray(c) for c in unpack(meta["cotangents"], arrays)]

        def step_in(dtype):
            return call.step(dtype, variables, injector)

        resident = _reset_peak_memory()
        narrow_step = step_in(jnp.float32)
        with _modules_run() as ran:
            (_, (outputs, updates)), (grad_params, grad_inputs) = narrow_step(variables, floats, rest, cots)
        result["ran"] = sorted(ran)
        wide_needs = resident + 2 * (_peak_memory() - resident)  # float64 doubles what the float32 call took
        want_paths = array_paths(meta["outputs"])
        got_leaves = jax.tree_util.tree_leaves(outputs)
        if len(got_leaves) != len(want_paths):
            return {**result, "status": Status.MISMATCH, "outputs": [],
                    "message": f"{len(got_leaves)} outputs, keras gave {len(want_paths)}"}
        values, problems = _compared_values(meta, arrays, want_paths, got_leaves, grad_params, grad_inputs, init,
                                            any(c is not None for c in cots))
        if meta.get("state_units"):
            result["state"] = _state_checks(meta, arrays, init, updates, tolerance)
        checks = [compare(name, got, want, tolerance) for name, got, want in values]
        values_only = not problems and not all(c["ok"] for c in checks) and all("max_abs" in c for c in checks)
        if values_only and wide_needs > 0.9 * memory_mb:
            result["note"] = (f"values off by float32 rounding or not: the float64 reference was not run (it needs about "
                              f"{wide_needs:.0f} MB, the job may use {memory_mb} MB: [tool.tern.verify] memory_mb)")
        elif values_only:
            del outputs, grad_params, grad_inputs
            jax.clear_caches()  # the float32 executables: a deep model's two compilations need not coexist
            with jax.enable_x64(True):
                wide = jax.tree_util.tree_map(_float64, (variables, floats))
                (_, (outputs, _)), (grad_params, grad_inputs) = step_in(jnp.float64)(*wide, rest, cots)
                wide_values, _ = _compared_values(meta, arrays, want_paths, jax.tree_util.tree_leaves(outputs),
                                                  grad_params, grad_inputs, init, any(c is not None for c in cots))
                keras64 = _keras_float64(reference, name, want_paths, outputs, grad_params, grad_inputs, init, cots)
            checks = [check if check["ok"] else against_float64(check, value, value64[1], tolerance, keras64.get(value[0]))
                      for check, value, value64 in zip(checks, values, wide_values)]
            if reference is None and not injector and not all(c["ok"] for c in checks):
                result["wants_reference"] = True  # a Keras float64 run may settle it (``reference.py``)
        compared_outputs = len(want_paths) - len(meta.get("stochastic", []))
        distributions: list[dict] = []
        result["outputs"] = checks[:compared_outputs]
        result["gradients"] = checks[compared_outputs:] + problems
        if injector:
            result["note"] = "; ".join(filter(None, [result.get("note"), f"Keras's {len(injector.draws)} random draws "
                                                     "injected into the translation: every output compared"]))
        if meta.get("stochastic"):
            sampled = ", ".join(want_paths[i][0] for i in meta["stochastic"])
            if meta.get("samples") or meta.get("keras_runs"):
                distributions, runs = _distribution_checks(meta, arrays, call, variables, want_paths)
                result["outputs"] += distributions
                told = (f"outputs {sampled} differ between Keras runs: compared as "
                        f"distributions over {runs} runs a side "
                        f"(energy-distance and Kolmogorov-Smirnov tests, alpha {ALPHA:g})")
            else:
                told = f"outputs {sampled} differ between two Keras runs (sampled): not compared"
            others = len(want_paths) - len(meta["stochastic"])
            result["note"] = "; ".join(filter(None, [result.get("note"), told + (", the call's other outputs are" if others else "")]))
        if meta.get("no_gradient"):
            result["note"] = "; ".join(filter(None, [result.get("note"), f"gradients not compared: TensorFlow has none "
                                                     f"({meta['no_gradient']})"]))
        if meta.get("defaults"):
            factory = origin_target(meta["origin"]) if meta["origin"].get("kind") == "factory" else None
            result["interface"] = default_checks(module, meta["defaults"], factory)
        if meta.get("probes"):
            started = time.perf_counter()
            result["probes"] = _probe(meta, arrays, narrow_step, step_in, variables, rest, cots, tolerance,
                                      _keras_probes64(reference, name))
            # what the probes cost, both sides: eval/bench_verify.py and docs/verify.md report it
            result["probe_ms"] = {"keras": meta.get("probe_ms", 0.0), "jax": (time.perf_counter() - started) * 1000}
            if reference is None and not injector and not all(c["ok"] for c in result["probes"]):
                result["wants_reference"] = True  # Keras's own float32 rounding may be the larger one
        compared = (checks + problems + distributions + result.get("probes", []) + result.get("state", [])
                    + result.get("interface", []))
        result["status"] = Status.MATCH if all(c["ok"] for c in compared) else Status.MISMATCH
        return result
    except DrawsDoNotLineUp:
        raise
    except Exception:  # noqa: BLE001 - a broken translation is a finding, not a crash
        return {**result, "status": Status.ERROR, "message": without_jax_notice(traceback.format_exc(limit=6))[-2000:]}


_JAX_NOTICE = "--------------------\nFor simplicity, JAX has removed its internal frames"


def without_jax_notice(text: str) -> str:
    """A traceback without JAX's closing note on filtered frames (it would end the message)."""
    at = text.find(_JAX_NOTICE)
    return text if at < 0 else text[:at].rstrip() + "\n"


def _state_checks(meta: dict, arrays: Any, init: Any, updates: Any, tolerance: dict | None) -> list[dict]:
    """The variables a training call updated (moving statistics, counters), as Keras left them
    after the call, against the collections the Flax call returned: a wrong momentum shows
    only in the next inference call, which the tests may never make."""
    units = [{**u, "tree": unpack(u["tree"], arrays)} for u in meta["state_units"]]
    want, problems = graft(init, units)
    if problems:
        return [{"name": "state after the call", "ok": False, "problem": "; ".join(problems)}]
    want_flat = flatten(want)
    checks = []
    for collection, tree in dict(updates).items():
        if collection == "params" or collection in DERIVED:
            continue
        for key, got in flatten({collection: dict(tree)}).items():
            if key in want_flat:
                checks.append(compare("state " + "/".join(key), np.asarray(got), want_flat[key], tolerance))
    return checks


def _keras_probes64(reference: Path | None, name: str) -> dict[str, list] | None:
    """Keras's float64 outputs at the case's probes, by probe name, if ``reference.py`` made them."""
    import jax

    if reference is None or not (reference / f"{name}.json").exists():
        return None
    meta, arrays = read_case(reference, name)
    return {probe["name"]: [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(unpack(probe["outputs"], arrays))]
            for probe in meta.get("probes", [])}


def _probe(meta: dict, arrays: Any, narrow_step: Any, step_in: Any, variables: Any, rest: list, cots: list,
           tolerance: dict | None, keras64: dict[str, list] | None) -> list[dict]:
    """The case's probes beyond the test's inputs (``probes.py``), through the same jitted
    step as the case (one compilation: the probes keep the inputs' shapes and dtypes)."""
    import jax
    import jax.numpy as jnp

    def run32(floats):
        (_, (outputs, _)), _ = narrow_step(variables, [jnp.asarray(a) for a in floats], rest, cots)
        return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(outputs)]

    def run64(floats):
        with jax.enable_x64(True):
            wide_variables, wide_floats = jax.tree_util.tree_map(_float64, (variables, [jnp.asarray(a) for a in floats]))
            (_, (outputs, _)), _ = step_in(jnp.float64)(wide_variables, wide_floats, rest, cots)
            return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(outputs)]

    return probe_checks(meta["probes"], arrays, run32, run64, tolerance, keras64)


def _replay_eagerly(result: dict, meta: dict, arrays: Any, module: Any, init: Any, inputs: tuple, rngs: dict,
                    tolerance: dict | None, injector: Injector | None) -> dict:
    """A layer whose output shape depends on the data (boolean masks, ``argwhere``) cannot
    be traced: its outputs are compared from an eager call, and its gradients are not
    compared (said so in the result, never counted as agreeing)."""
    import jax

    units = [{**u, "tree": unpack(u["tree"], arrays)} for u in meta["units"]]
    variables, problems = graft(jax.tree_util.tree_map(np.asarray, dict(init)), units)
    if problems:
        return {**result, "status": Status.ERROR, "message": "weights: " + "; ".join(problems)}
    call_args, call_kwargs = inputs
    training = bool(call_kwargs.get("training"))
    mutable = [c for c in variables if c != "params"] if training else False
    with injector.injected() if injector else contextlib.nullcontext():
        out = module.apply(variables, *call_args, rngs=rngs, mutable=mutable, **call_kwargs)
    out = out[0] if mutable else out
    want_paths = array_paths(meta["outputs"])
    got_leaves = jax.tree_util.tree_leaves(out)
    if len(got_leaves) != len(want_paths):
        return {**result, "status": Status.MISMATCH, "outputs": [], "message": f"{len(got_leaves)} outputs, keras gave {len(want_paths)}"}
    checks = [compare(path, got, want, tolerance) for path, got, want in _reproducible(meta, arrays, want_paths, got_leaves)]
    eager = "data-dependent output shapes: outputs compared eagerly, gradients not compared"
    if meta.get("stochastic"):
        eager += ", sampled outputs not compared (an untraced call is not sampled)"
    if not checks:
        return {**result, "status": Status.NOT_COMPARED, "outputs": [], "gradients": [], "note": eager}
    return {**result, "outputs": checks, "gradients": [], "eager": eager,
            "status": Status.MATCH if all(c["ok"] for c in checks) else Status.MISMATCH}


def _compared_values(meta, arrays, want_paths, got_leaves, grad_params, grad_inputs, init,
                     with_gradients: bool) -> tuple[list[tuple[str, Any, np.ndarray]], list[dict]]:
    """``(name, jax value, keras value)`` for the outputs, then the input gradients, then
    the parameter gradients (Keras's ported through the same weight map as the weights,
    so they land on the same Flax paths); a weight map that fails is a problem check."""
    import jax

    values = _reproducible(meta, arrays, want_paths, got_leaves)
    if not with_gradients:
        return values, []
    for i, (got, want) in enumerate(zip(grad_inputs, unpack(meta["input_grads"], arrays))):
        if want is not None:
            values.append((f"d/d input[{i}]", got, want))
    grad_units = [{**u, "tree": unpack(u["tree"], arrays)} for u in meta["grad_units"]]
    want_tree, problems = graft(init, grad_units)
    if problems:
        return values, [{"name": "d/d params", "ok": False, "problem": "; ".join(problems)}]
    got_flat = flatten(jax.tree_util.tree_map(np.asarray, dict(grad_params)))
    for key, want in flatten(want_tree.get("params", {})).items():
        values.append(("d/d " + "/".join(key), got_flat[key], want))
    return values, []


def _reproducible(meta, arrays, want_paths, got_leaves) -> list[tuple[str, Any, np.ndarray]]:
    """``(name, jax output, keras output)`` for the outputs Keras reproduced between two runs
    (a call's sampled outputs are listed under ``stochastic`` and left out)."""
    skipped = set(meta.get("stochastic", []))
    return [(path, got, arrays[f"a{index}"]) for i, ((path, index), got) in enumerate(zip(want_paths, got_leaves))
            if i not in skipped]


@contextlib.contextmanager
def _modules_run():
    """The Python modules whose Flax modules ran in a call: a package module of helper layers
    (keras-cv's ``csp_darknet_utils``) is compared through the calls it runs in."""
    import flax.linen as nn

    ran: set[str] = set()

    def note(method, args, kwargs, context):
        ran.add(type(context.module).__module__)
        return method(*args, **kwargs)

    with nn.intercept_methods(note):
        yield ran


def _reset_peak_memory() -> float:
    """This process's resident MB now, after restarting the count of its peak (Linux's
    ``clear_refs``; where that is refused the peak is the lifetime one: an overestimate)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    return _status_mb("VmRSS")


def _peak_memory() -> float:
    return _status_mb("VmHWM")


def _status_mb(field: str) -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _float64(leaf: Any) -> Any:
    import jax.numpy as jnp

    return jnp.asarray(leaf, jnp.float64) if jnp.issubdtype(jnp.result_type(leaf), jnp.floating) else leaf


def against_float64(check: dict, value: tuple, wide: Any, tolerance: dict | None, keras64: Any = None) -> dict:
    """A value that failed in float32, judged again against the translation's float64
    result: within its measured float32 rounding of Keras's float32 result, or, where the
    Keras float64 reference exists, within the tolerance of that (module docstring)."""
    name, narrow, want = value
    rounding = float(np.max(np.abs(np.asarray(narrow, np.float64) - np.asarray(wide, np.float64)), initial=0.0))
    scale = max(1.0, float(np.max(np.abs(np.asarray(wide, np.float64)), initial=0.0)))
    beyond = rounding > ROUNDING_CEILING * scale
    if not beyond:
        again = compare(name, wide, want, tolerance, rounding=rounding)
        if again["ok"]:
            return {**again, "float32": {k: check[k] for k in ("max_abs", "max_rel")}, "rounding": rounding,
                    "factor": ROUNDING_FACTOR}
    if keras64 is not None:
        # both sides in float64: ill-conditioned values (a normalisation over a constant input)
        # agree there when the translation is right; dropout left on, or any other error, does not
        both = compare(name, wide, keras64, tolerance)
        return {**both, "float32": {k: check[k] for k in ("max_abs", "max_rel")}, "keras_float64": True}
    if beyond:
        # not rounding: the translation computes something else in float64 (a draw that
        # depends on the dtype, dropout left on), and would excuse any error up to 8x that
        return {**check, "rounding": rounding, "problem": f"float32 and float64 runs of the translation differ by "
                f"{rounding:.3g}, beyond float32 rounding (> {ROUNDING_CEILING:g} x {scale:.3g}): not excused"}
    return {**again, "float32": {k: check[k] for k in ("max_abs", "max_rel")}, "rounding": rounding,
            "factor": ROUNDING_FACTOR}


def _keras_float64(reference: Path | None, name: str, want_paths, outputs, grad_params, grad_inputs, init,
                   cots) -> dict[str, np.ndarray]:
    """The Keras float64 values of the case by check name, if ``reference.py`` made them."""
    import jax

    if reference is None or not (reference / f"{name}.json").exists():
        return {}
    meta, arrays = read_case(reference, name)
    paths = array_paths(meta["outputs"])
    if len(paths) != len(want_paths):
        return {}
    wide_init = jax.tree_util.tree_map(lambda a: a.astype(np.float64) if a.dtype.kind == "f" else a, init)  # graft casts to it
    values, problems = _compared_values(meta, arrays, paths, jax.tree_util.tree_leaves(outputs), grad_params,
                                        grad_inputs, wide_init, any(c is not None for c in cots))
    return {} if problems else {value_name: keras for value_name, _, keras in values}


def replay_module(payload: dict, scratch: Path) -> dict:
    """Task: import the translated ``payload["module"]`` (an import failure is the
    module's result), then replay each case of ``payload["cases"]``
    (``{"dir", "id", "tolerance"}``)."""
    try:
        importlib.import_module(payload["module"])
    except BaseException:  # noqa: BLE001 - the module's own failure is the finding
        return {"import_error": _import_failure(), "cases": []}
    memory_mb = payload.get("memory_mb", 6144)
    return {"import_error": "", "cases": [replay_case(Path(c["dir"]), c["id"], c.get("tolerance"), memory_mb,
                                                      Path(c["reference"]) if c.get("reference") else None,
                                                      Path(c["samples"]) if c.get("samples") else None)
                                          for c in payload["cases"]]}


def _import_failure() -> str:
    text = traceback.format_exc(limit=-6)  # the innermost frames: where in the module it failed
    if "tensorflow" in text.splitlines()[-1]:
        return "the translation still imports TensorFlow: " + text.splitlines()[-1]
    return text[-2000:]
