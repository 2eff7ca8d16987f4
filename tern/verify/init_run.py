"""The initial weights' comparison (``inits.py``) for one translated module: Keras's runs
from a TF job cached by the recording, the translation's from a JAX job cached by the
recording and the translation, merged into the module's replay result.

Only cases the replay found equal, and only the first of each layer or model and
constructor configuration, are compared: a mismatch is already a finding, and a layer built
again the same way initializes the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tern.status import Status
from tern.verify import keys


def compared_ids(cases: list[dict]) -> list[str]:
    """The cases the replay found equal; the TF job keeps the first of each layer and
    constructor configuration (functions and training configurations have no weights)."""
    return [case["id"] for case in cases if case.get("status") == Status.MATCH and not case.get("eager")]


async def inits_module(verifier: Any, module: str, value: dict, recording_dir: str, jax_root: Path,
                       closure: str) -> dict:
    """``value`` (the module's replay result) with each compared case's ``init`` checks; a
    weight whose initial values differ in distribution makes its case a mismatch."""
    ids = compared_ids(value.get("cases", [])) if recording_dir else []
    if not ids:
        return value
    made = await verifier._keras_again("keras_inits", "init_samples", recording_dir, ids,
                                       f"Keras's initial weights of {len(ids)} layer(s)")
    if not made:
        return value
    key = keys.digest("inits", verifier._jax_versions(), keys.tern_fingerprint(), module, closure,
                      Path(recording_dir).name, Path(made).name)
    job = verifier._job("jax", "tern.verify.tasks:init_compare",
                        {"module": module, "cases": [{"dir": recording_dir, "id": i, "inits": made} for i in ids
                                                     if (Path(made) / f"{i}.json").exists()]}, jax_root)
    verifier.phases.setdefault("inits", 0.0)
    found, failure, hit = await verifier._run("inits", key, job)
    if found is None or found.get("import_error"):
        return value  # the replay's verdict stands; the job's failure is not the translation's
    if not hit:
        verifier.cache.put(key, "inits", found)
    return {**value, "cases": [_merged(c, found["cases"].get(c["id"])) for c in value["cases"]]}


def _merged(case: dict, found: dict | None) -> dict:
    if found is None:
        return case
    if "error" in found:
        return {**case, "init_notes": [f"initial weights not compared: {found['error']}"]}
    merged = {**case, "init": found["checks"], **({"init_notes": found["notes"]} if found["notes"] else {})}
    if any(not c["ok"] for c in found["checks"]):
        merged["status"] = Status.MISMATCH
    return merged
