"""Training-step results in the verify report: per module row, per package, as text.

A replayed step session (``step_replay.py``) is *equivalent* when the loss and every
parameter agreed after each of its N steps (and the trained model's initial weights agree in
distribution, ``init_run.inits_steps``), a *mismatch* (named by its first divergent
step and value) when one did not, an *error* when the translated step could not be run
the contract's way, and *not compared* with a reason when no honest comparison exists
(dropout masks, an optimizer the tables do not translate, a model rebuilt differently).
A mismatch or an error counts in the module's status like a replayed call's; a not
compared session is listed, never counted as a pass.
"""

from __future__ import annotations

from typing import Any

from tern.status import Status


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def add_training(rows: dict, trains: dict[str, tuple], make_row: Any) -> None:
    """Fold each module's train-job result into its row (``rows``: module -> ModuleRow;
    ``make_row(module)`` for a module without one)."""
    for module, (value, failure, hit) in trains.items():
        row = rows.setdefault(module, make_row(module))
        row.cached = row.cached or hit
        if failure is not None:
            row.problems.append(f"error: training replay job {failure.cause}: {_last_line(failure.error)}")
            continue
        for step in value.get("steps", []):
            entry = {k: step[k] for k in ("target", "id", "status", "steps", "batches", "optimizer", "rtol", "atol",
                                          "loop", "updates") if k in step}
            for k in ("compared", "loss", "params", "divergence", "reason", "note", "init", "init_notes"):
                if step.get(k) is not None:
                    entry[k] = step[k]
            if step.get("message"):
                entry["message"] = step["message"][-2000:]
            row.training.append(entry)
            if step["status"] == Status.NOT_COMPARED:
                continue
            row.train_total += 1
            if step["status"] == Status.EQUIVALENT:
                row.train_matched += 1
            elif step["status"] == Status.MISMATCH:
                row.problems.append(f"mismatch: training step {step['target']}: {describe_divergence(step)}")
            elif not (step.get("message", "").startswith("import:") and "import" in row.details):
                row.problems.append(f"error: training step {step['target']}: {_last_line(step.get('message', ''))}")


def describe_divergence(step: dict) -> str:
    """``step T of N (optimizer; batches): returned value: ...; first parameter to differ: ...``,
    or, for a session whose steps agree, the trained model's initial weights that differ."""
    wrong_init = [c for c in step.get("init", []) if not c["ok"]]
    if wrong_init and not step.get("divergence"):
        return "the trained model's initial weights: " + "; ".join(f"{c['name']}: {c.get('problem', '')}" for c in wrong_init)
    d = step.get("divergence") or {}
    where = (f"after the loop's {step.get('updates', '?')} updates" if step.get("loop")
             else f"step {d.get('step', '?')} of {step.get('steps', '?')}")
    parts = [f"{where} ({step.get('optimizer', '')}; {step.get('batches', '')})"]
    if d.get("returned"):
        parts.append(_check(d["returned"], d["returned"].get("name", "returned value")))
    parameter = d.get("parameter")
    if parameter:
        label = f"parameter {parameter.get('keras', '?')} (Flax {parameter.get('name', '?')})"
        if parameter["step"] != d.get("step"):
            label = f"first parameter to differ, at step {parameter['step']}: {label}"
        parts.append(_check(parameter, label))
    return ": ".join(parts[:1]) + ": " + "; ".join(parts[1:]) if len(parts) > 1 else parts[0]


def _check(check: dict, label: str) -> str:
    if "problem" in check:
        return f"{label}: {check['problem']}"
    at = f"[{', '.join(str(i) for i in check['index'])}]" if check.get("index") else ""
    values = f" jax {check['jax_value']:.9g} vs keras {check['keras_value']:.9g}" if "jax_value" in check else ""
    return (f"{label}{at}:{values} (max abs {check.get('max_abs', float('nan')):.3g}, max rel "
            f"{check.get('max_rel', float('nan')):.3g} > rtol {check.get('rtol', 0):g} / atol {check.get('atol', 0):g})")


def training_summary(rows: list, not_compared: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The package's ``training`` section: per step function its sessions and what was not
    compared, and one status (``"n/a"`` when the tests call no training step)."""
    by_target: dict[str, dict] = {}

    def function(target: str) -> dict:
        module, _, name = target.partition(":")
        return by_target.setdefault(target, {"module": module, "function": name, "sessions": [], "not_compared": {}})

    for row in rows:
        for entry in row.training:
            function(entry["target"])["sessions"].append(entry)
    for target, reasons in not_compared.items():
        function(target)["not_compared"].update(reasons)
    for item in by_target.values():
        for entry in item["sessions"]:
            if entry["status"] == Status.NOT_COMPARED:
                reason = entry.get("reason", "")
                item["not_compared"][reason] = item["not_compared"].get(reason, 0) + 1
        item["sessions"] = [e for e in item["sessions"] if e["status"] != Status.NOT_COMPARED]
        item["status"] = Status.worst([e["status"] for e in item["sessions"]] + ([Status.NOT_COMPARED] if item["not_compared"] else []))
    status = Status.worst([item["status"] for item in by_target.values()])
    return {"status": status, "steps": [by_target[t] for t in sorted(by_target)]}


def training_lines(training: dict) -> list[str]:
    """Findings: per step function, the sessions that were not compared and why (mismatches
    and errors are their module's problems)."""
    return [f"{item['module']}:{item['function']}: training not compared{f' ({count} sessions)' if count > 1 else ''}: {reason}"
            for item in training.get("steps", []) for reason, count in item["not_compared"].items()]


def session_lines(training: dict) -> list[str]:
    """Every compared session, one line each, for the terminal."""
    lines = []
    for item in training.get("steps", []):
        for entry in item["sessions"]:
            lines.append(f"{item['module']}:{item['function']}: training {entry['status']}, {_compared(entry)}; max abs err loss "
                         f"{_err(entry, 'loss')}, params {_err(entry, 'params')} ({_detail(entry)})"
                         + (f"; {entry['note']}" if entry.get("note") else ""))
    return lines


def _compared(entry: dict) -> str:
    if entry.get("loop"):
        return (f"loop compared after its {entry.get('updates', '?')} updates (tolerance rtol {entry.get('rtol', 0):.2g}, "
                f"atol {entry.get('atol', 0):.2g}: per update x {entry.get('updates', '?')})")
    return f"{entry.get('compared', 0)}/{entry.get('steps', '?')} steps compared"


def _err(entry: dict, key: str) -> str:
    value = (entry.get(key) or {}).get("max_abs")
    return "-" if value is None else f"{value:.1e}"


def _detail(entry: dict) -> str:
    if entry["status"] == Status.MISMATCH:
        return describe_divergence(entry)
    if entry["status"] == Status.ERROR:
        lines = [line for line in entry.get("message", "").strip().splitlines() if line.strip()]
        return lines[-1] if lines else "error"
    return f"{entry.get('optimizer', '')}; {entry.get('batches', '')}"


def training_markdown(training: dict, head: str, md: Any) -> list[str]:
    """The report's training table (nothing when no step was called)."""
    if not training.get("steps"):
        return []
    lines = ["", f"{head}## Training steps: {training['status']}", "",
             "| step | N | result | loss max abs | params max abs | first divergence or reason |",
             "| --- | ---: | --- | ---: | ---: | --- |"]
    for item in training["steps"]:
        target = f"`{item['module']}:{item['function']}`"
        for entry in item["sessions"]:
            n = f"{entry.get('updates', '-')} (loop)" if entry.get("loop") else entry.get("steps", "-")
            lines.append(f"| {target} | {n} | {entry['status']} | {_err(entry, 'loss')} | "
                         f"{_err(entry, 'params')} | {md(_detail(entry))} |")
        for reason, count in item["not_compared"].items():
            lines.append(f"| {target} | - | not compared ({count}) | - | - | {md(reason)} |")
    return lines
