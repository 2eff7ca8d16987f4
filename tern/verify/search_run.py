"""The search beyond the probes (``search.py``) for one translated module: its rounds of
JAX and TF jobs, cached as one result, merged into the module's replay result.

Only cases the replay found equal are searched (a mismatch is already a finding). A value
the search judges off makes its case a mismatch, named with its point; the point (inputs
and Keras's float64 outputs) is kept under ``.tern/search-found/<case>/`` and judged first
by every later run from the same recording, whatever the search does then.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from tern.status import Status
from tern.verify import keys
from tern.verify.by_computation import EarlierResults


def searched_ids(cases: list[dict]) -> list[str]:
    """The replayed cases to search: equal on every value, and searchable (the replay told,
    ``replay.replay_case``)."""
    return [case["id"] for case in cases if case.get("status") == Status.MATCH and case.get("probes")
            and not case.get("eager") and case.get("not_searchable") == ""]


def saved_points(state_dir: Path, ident: str) -> list[str]:
    folder = state_dir / "search-found" / ident
    return sorted(str(p.with_suffix("")) for p in folder.glob("*.json")) if folder.is_dir() else []


async def search_module(verifier: Any, module: str, value: dict, recording_dir: str, jax_root: Path,
                        tf_root: Path, closure: str) -> dict:
    """``value`` (the module's replay result) with its searched cases' findings merged in."""
    rounds = verifier.config.search_rounds
    ids = searched_ids(value.get("cases", [])) if rounds > 0 and recording_dir else []
    if not ids:
        return value
    cases = {c["id"]: c for c in value["cases"]}
    saved = {ident: saved_points(verifier.cache.state_dir, ident) for ident in ids}
    tolerances = {ident: verifier.config.tolerance(cases[ident]["target"]) for ident in ids}
    key = keys.digest("search", verifier._jax_versions(), keys.versions(keys.TF_LIBRARIES), keys.tern_fingerprint(),
                      module, closure, sorted(tolerances.items(), key=lambda kv: kv[0]), Path(recording_dir).name,
                      rounds, verifier.config.keras, saved)
    final = verifier.cache.recordings / key
    found = verifier.cache.get(key, "search") if final.is_dir() else None
    if found is None:
        found = await _rounds(verifier, module, ids, saved, tolerances, recording_dir, jax_root, tf_root, key, rounds, closure)
        if found is None:
            return value
        verifier.cache.put(key, "search", found)
    return {**value, "cases": [_merged(c, found["cases"].get(c["id"]), final, verifier.cache.state_dir)
                               for c in value["cases"]]}


async def _rounds(verifier: Any, module: str, ids: list[str], saved: dict, tolerances: dict, recording_dir: str,
                  jax_root: Path, tf_root: Path, key: str, rounds: int, closure: str) -> dict | None:
    recordings = verifier.cache.recordings
    partial = recordings / f"{key}.partial-{os.getpid()}-{time.monotonic_ns()}"
    partial.mkdir(parents=True)
    kind = "tf_keras" if verifier.config.keras == "tf_keras" else "tf"
    verifier.phases.setdefault("search", 0.0)
    results: dict[str, dict] = {i: {"checks": [], "points": 0, "judged": 0, "rounds": 0, "reused": 0} for i in ids}
    # what the JAX rounds may keep between them names the translation whole; nothing when
    # its closure could not be hashed
    translation = keys.digest(str(jax_root), module, closure) if closure != "missing" else ""
    live, points, best = list(ids), "", ""
    earlier = _EarlierSearches(verifier, recording_dir, tolerances, saved, rounds)
    for k in range(rounds + 1):
        payload = {"module": module, "translation": translation,
                   "cases": [{"dir": recording_dir, "id": i, "tolerance": tolerances[i], "points": points, "best": best,
                              "saved": saved[i] if k == 0 else [], "known": earlier.known(i) if k == 0 else []}
                             for i in live]}
        jax_dir = partial / f"j{k}"
        answer, failure, _ = await verifier._run("search", None, verifier._job(
            "jax", "tern.verify.tasks:search_round", payload, jax_root, output=str(jax_dir)))
        if failure is not None or answer.get("import_error"):
            shutil.rmtree(partial, ignore_errors=True)
            return None  # the replay's verdict stands; the job's failure is not the translation's
        for ident, got in answer["cases"].items():
            row = results[ident]
            if "error" in got:
                row["not_searched"] = got["error"]
                continue
            row["points"] += got["points"]
            row["judged"] += got["judged"]
            row["reused"] += bool(got.get("reused"))  # JAX rounds that found the translation built
            row["rounds"] = k
            row["checks"].extend({**c, "input": f"t{k - 1}/{ident}" if c.get("point") is None else c["point"]}
                                 for c in got["checks"])
        live = [i for i in live if "error" not in answer["cases"].get(i, {"error": ""})]
        if k == 0:
            live = [i for i in live if not earlier.reused(i, answer["cases"][i].get("computation"), results)]
        if k == rounds or not live:
            break
        tf_dir = partial / f"t{k}"
        answer, failure, _ = await verifier._run("search", None, verifier._job(
            kind, "tern.verify.tasks:search_keras", {"dir": recording_dir, "cases": live, "from": str(jax_dir),
                                                     "round": k, "keras": verifier.config.keras},
            tf_root, output=str(tf_dir)))
        if failure is not None:
            shutil.rmtree(partial, ignore_errors=True)
            return None
        for ident, status in answer["cases"].items():
            if status != "ok":
                results[ident]["not_searched"] = f"keras: {status}"
        live = [i for i in live if answer["cases"].get(i) == "ok"]
        points, best = str(tf_dir), str(jax_dir)
        if not live:
            break
    final = recordings / key
    try:
        os.replace(partial, final)
    except OSError:  # another run finished the same search first
        shutil.rmtree(partial, ignore_errors=True)
    earlier.remember(results, final)
    return {"cases": results}


class _EarlierSearches:
    """Each searched case's result, kept under what determines it (``by_computation.py``):
    the recording, the case, its tolerance and saved points, the search's settings and
    versions, and what the translation computes for it (``search_replay._computation``),
    which the first JAX round names. After an edit that leaves a case's computation as it
    was, the first round stops once it has named it, and no later round runs for that
    case: they would evaluate the same computation at the same points."""

    def __init__(self, verifier: Any, recording_dir: str, tolerances: dict, saved: dict, rounds: int):
        base = (verifier._jax_versions(), keys.versions(keys.TF_LIBRARIES), keys.tern_fingerprint(),
                Path(recording_dir).name, rounds, verifier.config.keras)
        self._earlier = EarlierResults(
            verifier.cache, "search-case", {i: (*base, i, tolerances[i], saved[i]) for i in tolerances},
            valid=lambda row: all(os.path.exists(check["input"] + ".json") for check in row["checks"]))
        self._named: dict[str, str] = {}  # per case searched in full: its computation
        self.known = self._earlier.known

    def reused(self, ident: str, computation: str | None, results: dict) -> bool:
        """Whether an earlier search of the same computation answers for ``ident`` (its row
        then in ``results``)."""
        row = self._earlier.get(ident, computation)
        if row is None:
            if computation:
                self._named[ident] = computation
            return False
        results[ident] = {**row, "earlier": True}
        return True

    def remember(self, results: dict, final: Path) -> None:
        """The rows of the cases searched in full, their points named where they now lie."""
        for ident, computation in self._named.items():
            row = results[ident]
            checks = [{**c, "input": c["input"] if os.path.isabs(c["input"]) else str(final / c["input"])}
                      for c in row["checks"]]
            self._earlier.remember(ident, computation, {**row, "checks": checks})


def _merged(case: dict, found: dict | None, final: Path, state_dir: Path) -> dict:
    """The case with the search's judged values among its probes; a value off makes it a
    mismatch, and its point is kept for later runs."""
    if found is None:
        return case
    checks = [{**c, "input": _keep(final, c["input"], state_dir, case["id"]) if not c["ok"] else str(final / c["input"])}
              for c in found["checks"]]
    judged = [c for c in checks if "used" in c]
    worst = max(judged, key=lambda c: (not c["ok"], c["used"]), default=None)
    summary = {k: found[k] for k in ("points", "judged", "rounds", "reused", "earlier", "not_searched") if k in found}
    if worst is not None:
        summary["largest"] = {k: worst[k] for k in ("name", "ok", "max_abs", "max_rel", "used", "input")}
    merged = {**case, "probes": case.get("probes", []) + checks, "search": summary}
    if any(not c["ok"] for c in checks):
        merged["status"] = Status.MISMATCH
    return merged


def _keep(final: Path, relative: str, state_dir: Path, ident: str) -> str:
    """A point where the translation differs, copied out of the search's directory so later
    runs judge it first (``saved_points``); a saved point stays where it is."""
    source = Path(relative) if os.path.isabs(relative) else final / relative
    if str(source).startswith(str(state_dir / "search-found")):
        return str(source)
    folder = state_dir / "search-found" / ident
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{Path(final).name[:16]}-{source.parent.name}"
    for suffix in (".npz", ".json"):  # the JSON last: its presence marks a whole point
        if source.with_suffix(suffix).exists() and not target.with_suffix(suffix).exists():
            tmp = target.with_name(f".{target.name}{suffix}.{os.getpid()}")
            shutil.copyfile(source.with_suffix(suffix), tmp)
            os.replace(tmp, target.with_suffix(suffix))
    return str(target)
