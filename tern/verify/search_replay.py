"""JAX worker task: the translation's half of a search round (``search.py``).

Per case, the translated module is built and given the Keras weights as for the replay
(``layer_call.py``), or the translated function is called on the recorded arguments, and
run in float64. Round 0 evaluates it at the recorded inputs and
the probes (against Keras's recorded float32 outputs: only to choose where to start); later
rounds at the points the TF job stepped to (against Keras's float64 outputs there: these
are judged) and at the previous round's worst point. The worst point is written with the
scaled residual ``r`` and the translation's ``J^T r`` there, for the next TF job, and is
the saved input of the largest difference found.
"""

from __future__ import annotations

import hashlib
import importlib
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tern.sandbox.jobs import OUTPUT
from tern.sandbox.lowerings import computations_seen
from tern.verify.arrays import array_paths, pack, read_case, replaced, unpack, write_case
from tern.verify.between_jobs import held, kept, recorded_case
from tern.verify.by_computation import name_of
from tern.verify.layer_call import layer_call, ported_variables
from tern.verify.probes import judged_leaves
from tern.verify.replay import call_kwargs, without_jax_notice
from tern.verify.replay_functions import call_function, needs_key
from tern.verify.search import QUICK_COMPILE, scaled_residual
from tern.verify.tolerance import compare


def search_round(payload: dict, scratch: Path) -> dict:
    """Task: ``payload["cases"]`` (``{"dir", "id", "tolerance", "points", "best"}``: the
    recording, the TF job's points or "" in round 0, the previous JAX job's directory or
    ""), each case's worst point written to ``scratch / OUTPUT``. Returns per id the judged
    values (``checks``), the worst point's name and share of its tolerance, or an ``error``."""
    try:
        importlib.import_module(payload["module"])
    except BaseException:  # noqa: BLE001 - the replay reports the import failure
        return {"import_error": traceback.format_exc(limit=-2)[-1000:], "cases": {}}
    out = scratch / OUTPUT
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for case in payload["cases"]:
        try:
            results[case["id"]] = _round(case, out, payload.get("translation", ""))
        except Exception:  # noqa: BLE001 - this case is not searched further; the reason comes back
            # the error's own line, not JAX's closing note on the frames it filtered
            results[case["id"]] = {"error": without_jax_notice(traceback.format_exc(limit=2)).strip().splitlines()[-1][:300]}
    return {"import_error": "", "cases": results}


def _points(case: dict, meta: dict, arrays: Any, recorded_floats: list) -> list[tuple]:
    """``(name, float inputs, Keras output leaves, compared positions, packed outputs (for
    their names), source)`` per point to evaluate; ``source`` is None for points only
    evaluated (Keras's float32 outputs), "" for the TF job's points, a path for a saved one:
    these are judged."""
    import jax

    def leaves(packed: Any, data: Any) -> list:
        return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(unpack(packed, data))]

    found = []
    if not case["points"]:
        recorded = leaves(meta["outputs"], arrays)
        found.append(("recorded inputs", recorded_floats, recorded,
                      judged_leaves(recorded, set(meta.get("stochastic", []))), meta["outputs"], None))
        for probe in meta.get("probes", []):
            found.append((probe["name"], unpack(probe["inputs"], arrays), leaves(probe["outputs"], arrays),
                          probe["compared"], probe["outputs"], None))
        for path in case.get("saved", []):  # where an earlier run found the translation off: judged first
            found.extend(_judged_points(Path(path), path))
        return found
    if (Path(case["points"]) / f"{case['id']}.json").exists():
        found.extend(_judged_points(Path(case["points"]) / case["id"], ""))
    best, best_arrays = read_case(Path(case["best"]), case["id"])
    found.append((best["name"], unpack(best["x"], best_arrays), unpack(best["keras"], best_arrays), best["compared"],
                  best["paths"], None))
    return found


def _judged_points(path: Path, source: str) -> list[tuple]:
    """The points a TF job stepped to (or a saved one), with Keras's float64 outputs there."""
    import jax

    points, arrays = read_case(path.parent, path.name)
    return [(probe["name"], unpack(probe["inputs"], arrays),
             [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(unpack(probe["outputs"], arrays))],
             probe["compared"], probe["outputs"], source) for probe in points["probes"]]


def _layer_runner(meta: dict, arrays: Any) -> tuple[Callable, list]:
    """``(run, the recorded float inputs)`` for a layer case: ``run(floats, cotangents)`` gives
    the translation's float64 output leaves and, unless ``cotangents`` is None, ``J^T c``
    per float input (one jitted step: ``layer_call.py``). To be called under x64."""
    import jax
    import jax.numpy as jnp

    call = layer_call(meta, arrays, call_kwargs)
    _, variables, problems = ported_variables(call.abstract(), meta, arrays)
    if problems:
        raise ValueError("weights: " + "; ".join(problems))
    args, kwargs = unpack(meta["inputs"], arrays)
    flat = jax.tree_util.tree_leaves([list(args), kwargs])
    zeros = [np.zeros(np.shape(leaf)) for leaf in jax.tree_util.tree_leaves(unpack(meta["outputs"], arrays))]
    step = call.step(jnp.float64, variables, compiler_options=QUICK_COMPILE)

    def run(floats: list, cotangents: list | None) -> tuple[list, list | None]:
        wide = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64) if a.dtype.kind == "f" else a, variables)
        given = zeros if cotangents is None else [z if c is None else c for z, c in zip(zeros, cotangents)]
        (_, (outputs, _)), (_, grads) = step(wide, [jnp.asarray(a, jnp.float64) for a in floats], call.rest,
                                             [jnp.asarray(c, jnp.float64) for c in given])
        outs = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(outputs)]
        return outs, None if cotangents is None else [np.asarray(g) for g in grads]

    # the step's arguments besides the points: the weights as ported to the translation's
    # variables, and the other array inputs as its call takes them
    run.arguments = lambda: values_digest([variables, call.rest])
    run.eager = lambda: False  # one jitted step, or an error
    # by its name in JAX's lowering; the step holds its derivatives
    run.jitted = {getattr(step, "__wrapped__", step).__name__: "with derivatives"}
    return run, [flat[i] for i in meta["float_inputs"]]


def _function_runner(meta: dict, arrays: Any) -> tuple[Callable, list]:
    """The same for a package function's case: the translated function called on the
    recorded arguments with the float ones replaced (``_compiled_or_eager``), ``J^T c`` by
    ``jax.vjp``. A function JAX cannot differentiate (a ``while_loop``) gives None for it:
    the search then only steps around the start, not along an ascent."""
    import jax
    import jax.numpy as jnp

    float_at = meta["probes"][0]["float_at"]
    key = 0 if needs_key(meta, arrays) else None

    def outputs_at(floats: list) -> list:
        return call_function(meta, replaced(arrays, float_at, floats), key)

    def outputs_of(*floats: Any) -> list:
        return outputs_at(list(floats))

    def with_pullback(floats: list, residuals: list) -> tuple[list, list]:
        """Outputs and ``J^T residuals`` in one function: compiled once for both."""
        outs, back = jax.vjp(outputs_of, *floats)
        return outs, back([c.astype(o.dtype) if jnp.issubdtype(o.dtype, jnp.inexact)
                           else np.zeros(o.shape, jax.dtypes.float0) for o, c in zip(outs, residuals)])

    def forward_needs_eager(wide: list, given: list) -> bool:
        forward(*wide)
        return forward.eager

    zeros = [np.zeros(np.shape(leaf)) for leaf in jax.tree_util.tree_leaves(unpack(meta["outputs"], arrays))]
    forward, differentiable = _compiled_or_eager(outputs_of), [True]
    # outputs and pullback compile or fail together; when the outputs alone compile, their
    # failure is the pullback's (a while_loop has none), and it would fail eagerly too
    both = _compiled_or_eager(with_pullback, eager_may_help=forward_needs_eager)

    def run(floats: list, cotangents: list | None) -> tuple[list, list | None]:
        wide = [jnp.asarray(a, jnp.float64) for a in floats]
        if differentiable:
            given = zeros if cotangents is None else [z if c is None else c for z, c in zip(zeros, cotangents)]
            try:
                outs, grads = both(wide, given)
                return [np.asarray(o) for o in outs], None if cotangents is None else [np.asarray(g) for g in grads]
            except Exception:  # noqa: BLE001 - not reverse-differentiable (a while_loop): outputs only, no ascent
                differentiable.clear()
        return [np.asarray(leaf) for leaf in forward(*wide)], None

    run.arguments = lambda: ""  # the points are its only arguments
    # a call run eagerly is not one computation
    run.eager = lambda: forward.eager or bool(differentiable and both.eager)
    run.jitted = {with_pullback.__name__: "with derivatives", outputs_of.__name__: "outputs only"}
    return run, [arrays[f"a{at}"] for at in float_at]


def values_digest(tree: Any) -> str | None:
    """A digest of ``tree``'s structure and of every leaf's dtype, shape and bytes; None when a
    leaf is not an array."""
    import jax

    from tern.sandbox.lowerings import digest_arrays

    leaves, treedef = jax.tree_util.tree_flatten(tree)
    if not all(hasattr(leaf, "dtype") and hasattr(leaf, "shape") for leaf in leaves):
        return None
    digest = hashlib.sha256(str(treedef).encode())
    digest_arrays(leaves, digest)
    return digest.hexdigest()


def _compiled_or_eager(function: Callable, eager_may_help: Callable[..., bool] = lambda *args: True) -> Callable:
    """``function`` jitted (XLA would otherwise compile an eager call op by op, each op new in
    float64), or called eagerly from its first failure on: a function whose Python reads
    values (a shape from an array) runs only eagerly, as the replay calls it. Unless
    ``eager_may_help(*args)`` says otherwise: the failure is then raised."""
    import jax

    compiled = [jax.jit(function, compiler_options=QUICK_COMPILE)]

    def call(*args: Any) -> Any:
        if compiled:
            try:
                return compiled[0](*args)
            except Exception:  # noqa: BLE001 - eagerly then; an error there is the function's own
                if not eager_may_help(*args):
                    raise
                compiled.clear()
                call.eager = True
        return function(*args)

    call.eager = False
    return call


def _built(directory: str, ident: str) -> tuple[dict, dict, Callable, list]:
    """``(meta, arrays, run, the recorded float inputs)`` of a recorded case: the weights
    ported as for the replay, outside x64."""
    meta, arrays = recorded_case(Path(directory), ident)
    run, recorded_floats = (_function_runner if meta.get("kind") == "function" else _layer_runner)(meta, arrays)
    return meta, arrays, run, recorded_floats


def _round(case: dict, out: Path, translation: str) -> dict:
    """``translation`` names the translated code (location and closure hash) or is "" when
    nothing may be kept between rounds (``between_jobs.py``)."""
    import jax

    # the PRNG this job runs with too: a kept key of another implementation would be stale
    key = ("search", translation, case["dir"], case["id"], jax.config.jax_default_prng_impl) if translation else None
    reused = held(key)
    meta, arrays, run, recorded_floats = kept(key, lambda: _built(case["dir"], case["id"]))
    tolerance = case.get("tolerance")
    first_round, computation = not case["points"], None
    with jax.enable_x64(True), computations_seen() as seen:
        checks, evaluated = [], []
        for name, floats, want, compared, packed_outputs, source in _points(case, meta, arrays, recorded_floats):
            got, _ = run(floats, None)
            if first_round and not evaluated:  # every later point runs what the first one lowered
                computation = _computation(seen, run)
                if computation is not None and computation in case.get("known", ()):
                    # an earlier search of this very computation stands (``search_run.py``)
                    return {"name": name, "used": 0.0, "points": 1, "judged": 0, "reused": reused, "checks": [],
                            "computation": computation, "known": True}
            if len(got) != len(want):
                raise ValueError(f"{len(got)} outputs, keras gave {len(want)}")
            used, residual = scaled_residual(got, want, compared, tolerance)
            evaluated.append((used, name, floats, want, compared, packed_outputs, residual))
            if source is not None:
                paths = array_paths(packed_outputs)
                checks.extend({**compare(f"{paths[i][0]} @ {name}", got[i], want[i], tolerance), "point": source or None}
                              for i in compared)
        used, name, floats, want, compared, packed_outputs, residual = max(evaluated, key=lambda e: e[0])
        _, grads = run(floats, residual)
    saved: list[np.ndarray] = []
    write_case(out, case["id"], {"name": name, "used": used, "compared": compared, "paths": packed_outputs,
                                 "x": pack([np.asarray(a, np.float64) for a in floats], saved),
                                 "keras": pack([np.asarray(w) for w in want], saved),
                                 "r": pack(residual, saved),
                                 # None: the translation cannot be differentiated here; no ascent
                                 "g": None if grads is None else pack(grads, saved)}, saved)
    failed = [c for c in checks if not c["ok"]]
    worst = max((c for c in checks if "used" in c), key=lambda c: c["used"], default=None)
    return {"name": name, "used": used, "points": len(evaluated), "judged": len(checks), "reused": reused,
            "checks": failed or ([worst] if worst else []),
            # a call that ran eagerly after the first point leaves the computation unnamed
            "computation": computation if computation is not None and not run.eager() else None}


def _computation(seen: list[tuple[str, str | None, bool]], run: Callable) -> str | None:
    """What the translation computed in this round, named by content (``lowerings.py``): the
    computations JAX lowered, in order, and the arguments they were given besides the points.
    None when that does not name all of it: nothing was lowered (a step kept from an earlier
    job), one computation could not be told by content, or a call ran eagerly. With the same
    recording, the same name gives the same search: every round evaluates these computations
    only, at points that follow from the recording and from their values."""
    if run.eager():
        return None
    arguments = run.arguments()
    # the eager operations around (the points made float64) are left out: JAX lowers each
    # once per worker, so whether one is seen depends on the worker's past jobs
    ran = [(digest, run.jitted[name], custom) for name, digest, custom in seen if name in run.jitted]
    if not ran or arguments is None or any(digest is None for digest, _, _ in ran):
        return None
    if any(what == "outputs only" and custom for _, what, custom in ran):
        # the outputs alone, and a custom rule in them: whether the pullback fails (and
        # the search has no ascent) is the rule's, which the digest does not name
        return None
    ran = [digest for digest, _, _ in ran]
    return name_of(ran, arguments)
