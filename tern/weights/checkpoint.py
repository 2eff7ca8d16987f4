"""The Flax variables ``tern weights`` wrote, for your JAX code.

A ``tern weights`` output directory holds ``tern-weights.json`` (what was ported and how
the replay compared) and ``checkpoint/`` (the variables tree, saved with orbax's
``StandardCheckpointer``)::

    from tern.weights.checkpoint import load_variables

    variables = load_variables("weights/")  # {"params": ..., "batch_stats": ...}
    logits = MLPClassifier(hidden_units=64).apply(variables, x)

This module owns that layout: the ``tern weights`` command saves and publishes through it
too. Loading checks every leaf against the report (path, shape, dtype, SHA-256): orbax
restores a tree without checking it against an expected one, and a checkpoint edited
or copied half-way should fail here, not later inside ``apply``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from tern.status import Status

REPORT = "tern-weights.json"
CHECKPOINT = "checkpoint"


class WeightsError(ValueError):
    """The directory holds no usable ``tern weights`` output; the message says why."""


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict) or hasattr(tree, "items"):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flatten(value, f"{prefix}/{key}" if prefix else str(key)))
        return out
    return {prefix: tree}


def describe(variables: dict) -> list[dict]:
    """One entry per leaf: ``{"path": "params/dense1/kernel", "shape", "dtype", "sha256"}``."""
    entries = []
    for path, value in _flatten(variables).items():
        array = np.ascontiguousarray(value)
        entries.append({"path": path, "shape": list(array.shape), "dtype": array.dtype.name,
                        "sha256": hashlib.sha256(array.tobytes()).hexdigest()})
    return entries


def save_variables(path: Path, variables: dict) -> None:
    """Write ``variables`` (nested dicts of arrays) at ``path``, which must not exist."""
    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(Path(path).resolve(), variables)
        checkpointer.wait_until_finished()


def publish(staged: Path, out: Path) -> None:
    """Move the directory ``staged`` to ``out`` in one rename, replacing a previous output
    (copied beside ``out`` first when the two are on different file systems): a reader of
    ``out`` sees the old output or the new one, never a mix."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    copy, old = out.parent / f".{out.name}.tern-new-{tag}", out.parent / f".{out.name}.tern-old-{tag}"
    try:
        if os.stat(staged).st_dev != os.stat(out.parent).st_dev:
            shutil.copytree(staged, copy)
            staged = copy
        if out.exists():
            os.replace(out, old)
        try:
            os.replace(staged, out)
        except OSError:
            if old.exists():
                os.replace(old, out)
            raise
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)


def read_report(directory: str | Path) -> dict:
    path = Path(directory) / REPORT
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise WeightsError(f"{directory}: no {REPORT} (not a tern weights output)") from None
    except ValueError as exc:
        raise WeightsError(f"{path}: not JSON ({exc})") from None


def load_variables(directory: str | Path, *, allow_mismatch: bool = False, as_jax: bool = True) -> dict:
    """The variables tree saved in ``directory`` by ``tern weights``.

    Args:
      directory: the ``--out`` directory of ``tern weights``.
      allow_mismatch: also load weights whose replay did not match the Keras outputs
        (the report's ``status`` is ``"mismatch"``); by default only ``"equivalent"`` loads.
      as_jax: leaves as ``jax.Array`` (else as the NumPy arrays orbax restores).

    Raises:
      WeightsError: no checkpoint, a port that failed, or leaves that differ from the report.
    """
    report = read_report(directory)
    status = report.get("status")
    if status != Status.EQUIVALENT and not (allow_mismatch and status == Status.MISMATCH):
        reason = "; ".join(report.get("problems", [])) or report.get("message", "")
        raise WeightsError(f"{directory}: tern weights reported {status}" + (f" ({reason})" if reason else "")
                           + ("; pass allow_mismatch=True to load it anyway" if status == Status.MISMATCH else ""))
    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as checkpointer:
        variables = checkpointer.restore((Path(directory) / CHECKPOINT).resolve())
    want = {v["path"]: v for v in report.get("variables", [])}
    got = {v["path"]: v for v in describe(variables)}
    if set(want) != set(got):
        raise WeightsError(f"{directory}: checkpoint leaves differ from the report: "
                           f"{sorted(set(want) ^ set(got))[:6]}")
    changed = [p for p in want if want[p] != got[p]]
    if changed:
        raise WeightsError(f"{directory}: leaves whose shape, dtype or content differ from the report: {changed[:6]}")
    if as_jax:
        import jax

        variables = jax.tree_util.tree_map(jax.numpy.asarray, variables)
    return variables
