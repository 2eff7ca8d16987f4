"""The initial weights' comparison (``inits.py``) for one translated module: Keras's runs
from a TF job cached by the recording, the translation's from a JAX job cached by the
recording and the translation, merged into the module's replay result.

Also for the model each training-step session the step replay found equal trained
(``inits_steps``). Only cases the replay found equal, and only the first of each layer or
model and constructor configuration, are compared: a mismatch is already a finding, and a layer built
again the same way initializes the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tern.status import Status
from tern.verify import keys
from tern.verify.by_computation import EarlierResults
from tern.verify.inits import COMPARED_THERE, NOT_A_LAYER


def compared_ids(cases: list[dict]) -> list[str]:
    """The cases the replay found equal; the TF job keeps the first of each layer and
    constructor configuration (functions and training configurations have no weights); a
    configuration the recorder made beyond the tests' (``variants.py``) is compared on its
    outputs alone."""
    return [case["id"] for case in cases
            if case.get("status") == Status.MATCH and not case.get("eager") and not case.get("variant")]


async def inits_module(verifier: Any, module: str, value: dict, recording_dir: str, jax_root: Path,
                       closure: str) -> dict:
    """``value`` (the module's replay result) with each compared case's ``init`` checks; a
    weight whose initial values differ in distribution makes its case a mismatch."""
    ids = compared_ids(value.get("cases", [])) if recording_dir else []
    found = await _compared(verifier, module, ids, recording_dir, jax_root, closure, "layer(s)")
    if found is None:
        return value
    return {**value, "cases": [_merged(c, found.get(c["id"])) for c in value["cases"]]}


async def inits_steps(verifier: Any, module: str, value: dict, recording_dir: str, jax_root: Path,
                      closures: dict) -> dict:
    """``value`` (the module's training-step replay result) with the ``init`` checks of the
    model each session the replay found equal trained (the steps start from Keras's
    weights, ported: a model trained from scratch starts from its initializers); a
    difference makes the session a mismatch."""
    ids = [s["id"] for s in value.get("steps", []) if s.get("status") == Status.EQUIVALENT] if recording_dir else []
    found = await _compared(verifier, module, ids, recording_dir, jax_root, closures, "trained model(s)")
    if found is None:
        return value
    return {**value, "steps": [_merged(s, found.get(s["id"]), Status.EQUIVALENT) for s in value["steps"]]}


async def _compared(verifier: Any, module: str, ids: list[str], recording_dir: str, jax_root: Path, closure: Any,
                    what: str) -> dict | None:
    """Per id, the JAX job's ``{"checks", "notes"}`` or ``{"error"}``; None when nothing was compared."""
    if not ids:
        return None
    made, drawn = await verifier.keras_runs("keras_inits", "init_samples", recording_dir, ids,
                                            f"Keras's initial weights of {len(ids)} {what}")
    # why Keras's side was not drawn, told (a case of a configuration compared in another is not)
    untold = {i: {"error": f"Keras's side: {why}"} for i, why in drawn.items()
              if why != "ok" and not why.endswith((COMPARED_THERE, NOT_A_LAYER))}
    if not made:
        return untold or None
    key = keys.digest("inits", verifier._jax_versions(), keys.tern_fingerprint(), module, closure,
                      Path(recording_dir).name, Path(made).name)
    drawn_ids = [i for i in ids if (Path(made) / f"{i}.json").exists()]
    # what a case's checks depend on besides what its translation computes (``by_computation.py``)
    earlier = EarlierResults(verifier.cache, "inits-case", {
        i: (verifier._jax_versions(), keys.tern_fingerprint(), Path(recording_dir).name, Path(made).name, i)
        for i in drawn_ids})
    job = verifier._job("jax", "tern.verify.tasks:init_compare",
                        {"module": module, "cases": [{"dir": recording_dir, "id": i, "inits": made, "known": earlier.known(i)}
                                                     for i in drawn_ids]}, jax_root)
    verifier.phases.setdefault("inits", 0.0)
    found, failure, hit = await verifier._run("inits", key, job)
    if found is None or found.get("import_error"):
        return untold or None  # the replay's verdict stands; the job's failure is not the translation's
    if not hit:
        cases = {}
        for ident, row in found["cases"].items():
            name = row.get("computation")
            if row.get("known"):
                kept = earlier.get(ident, name)
                row = {**kept, "earlier": True} if kept is not None else {"error": "the earlier comparison it matched is gone"}
            elif name and "error" not in row:
                earlier.remember(ident, name, {k: v for k, v in row.items() if k != "computation"})
            cases[ident] = {k: v for k, v in row.items() if k != "computation"}
        found = {**found, "cases": cases}
        verifier.cache.put(key, "inits", found)
    return {**untold, **found["cases"]}


def _merged(case: dict, found: dict | None, equal: str = Status.MATCH) -> dict:
    """``equal``: the status the case had (replayed calls and steps name it differently)."""
    if found is None or case.get("status") != equal:
        return case
    if "error" in found:
        return {**case, "init_notes": [f"initial weights not compared: {found['error']}"]}
    merged = {**case, "init": found["checks"], **({"init_notes": found["notes"]} if found["notes"] else {}),
              **({"init_earlier": True} if found.get("earlier") else {})}  # the computation compared before
    if any(not c["ok"] for c in found["checks"]):
        merged["status"] = Status.MISMATCH
    return merged
