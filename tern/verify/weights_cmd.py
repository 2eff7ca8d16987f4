"""``tern weights``: a saved TF model's weights as the translation's Flax variables, checked.

Two sandbox jobs (``weights_tasks.py``): the TF worker loads the source into the
original model and exports its variables, inputs and outputs; the JAX worker grafts the
variables into the translated module's tree, replays the inputs and saves the tree with
orbax. Everything is written in a private directory under ``.tern/weights/`` and moved
to ``--out`` whole at the end, so ``--out`` never holds half an output.

``--out`` receives ``tern-weights.json`` and, unless the port failed, ``checkpoint/``
(see ``tern.weights.checkpoint``). Exit 0: the replay matches; 1: a mismatch or a port that
cannot be made; 2: bad usage.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tern.errors import UsageError
from tern.status import Status
from tern.verify.arrays import pack, unpack
from tern.weights.checkpoint import CHECKPOINT, REPORT, publish

FORMATS = ("keras", "h5", "checkpoint", "savedmodel")
_MODEL = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
#: the report's status when the request turned out unusable (exit 2, nothing written)
USAGE = "usage"


@dataclass(frozen=True)
class Request:
    source: Path
    format: str
    original: Path
    translated: Path
    out: Path
    model: dict | None = None  # {"module", "name"}
    args: Any = field(default_factory=list)  # packed (arrays.pack) constructor arguments
    kwargs: Any = field(default_factory=dict)
    inputs: list[dict] = field(default_factory=list)  # [{"shape", "dtype"}]
    tolerance: dict = field(default_factory=lambda: {"rtol": 1e-5, "atol": 1e-5})
    keras: str = "keras3"  # the TF side's Keras ([tool.tern] keras, as for tern verify)
    limits: dict = field(default_factory=dict)  # Job timeout, cpu_seconds, memory_mb ([tool.tern.verify])

    @property
    def package(self) -> str:
        return self.original.name


def detect_format(source: Path) -> str:
    if source.is_dir():
        if (source / "saved_model.pb").is_file() or (source / "saved_model.pbtxt").is_file():
            return "savedmodel"
        if (source / "checkpoint").is_file() or any(source.glob("*.index")):
            return "checkpoint"
    elif source.is_file():
        name = source.name.lower()
        if name.endswith(".keras"):
            return "keras"
        if name.endswith((".h5", ".hdf5")):
            return "h5"
    elif Path(f"{source}.index").is_file():
        return "checkpoint"
    raise UsageError(f"{source}: cannot tell its format (.keras, .h5, a checkpoint or a SavedModel); pass --format")


def _json(text: str | None, kind: type, option: str) -> Any:
    if text is None:
        return kind()
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{option}: not JSON ({exc})") from None
    if not isinstance(value, kind):
        raise UsageError(f"{option}: expected a JSON {'list' if kind is list else 'object'}")
    return value


def _inputs(shapes: list[str], dtypes: list[str]) -> list[dict]:
    if dtypes and len(dtypes) not in (1, len(shapes)):
        raise UsageError(f"{len(dtypes)} --input-dtype for {len(shapes)} --input-shape (give one, or one each)")
    specs = []
    for i, text in enumerate(shapes):
        try:
            shape = [int(d) for d in text.replace("x", ",").split(",") if d.strip()]
        except ValueError:
            raise UsageError(f"--input-shape {text!r}: expected integers like 2,12") from None
        if not shape or any(d <= 0 for d in shape):
            raise UsageError(f"--input-shape {text!r}: expected positive integers like 2,12")
        dtype = dtypes[i] if len(dtypes) > 1 else dtypes[0] if dtypes else "float32"
        if not re.fullmatch(r"(float|int|uint)(8|16|32|64)|bfloat16|bool", dtype):
            raise UsageError(f"--input-dtype {dtype!r}: not a numeric dtype name")
        specs.append({"shape": shape, "dtype": dtype})
    return specs


def _package(path: Path, option: str) -> Path:
    if not (path / "__init__.py").is_file():
        raise UsageError(f"{option} {path}: not a package directory (no __init__.py)")
    return path.resolve()


def make_request(source: Path, *, original: Path, translated: Path, out: Path, model: str | None = None,
                 fmt: str | None = None, args: str | None = None, kwargs: str | None = None,
                 shapes: tuple[str, ...] = (), dtypes: tuple[str, ...] = (), rtol: float | None = None,
                 atol: float | None = None) -> Request:
    """Check the command line before any job starts; raises UsageError. Tolerances, the
    Keras flavour and job limits default to the original's ``[tool.tern]`` settings."""
    from tern.verify.config import ConfigError, load_config

    if source.name.endswith(".index") and source.is_file():
        source = source.with_suffix("")
    if not source.exists() and not Path(f"{source}.index").is_file():
        raise UsageError(f"{source}: no such file or directory")
    if fmt is not None and fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    fmt = fmt or detect_format(source)
    original, translated = _package(original, "--original"), _package(translated, "--translated")
    spec = None
    if model is not None:
        if not _MODEL.match(model):
            raise UsageError(f"--model {model!r}: expected pkg.module:Name")
        module, name = model.split(":")
        if module.split(".")[0] != original.name:
            raise UsageError(f"--model {model}: not in the package {original.name}")
        spec = {"module": module, "name": name}
    elif fmt != "keras":
        raise UsageError(f"a {fmt} source holds weights only: pass --model {original.name}.module:Name")
    if out.is_file() or (out.is_dir() and any(out.iterdir()) and not (out / REPORT).is_file()):
        raise UsageError(f"--out {out}: exists and is not a tern weights output (refusing to replace it)")
    try:
        config = load_config(original)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    tolerance = {"rtol": 1e-5, "atol": 1e-5, **(config.tolerance(model or original.name) or {})}
    tolerance.update({k: v for k, v in (("rtol", rtol), ("atol", atol)) if v is not None})
    if min(tolerance.values()) < 0:
        raise UsageError("--rtol and --atol must be >= 0")
    limits = {"timeout": config.timeout, "cpu_seconds": config.timeout * 2, "memory_mb": config.memory_mb}
    return Request(source.absolute(), fmt, original, translated, out.absolute(), spec,
                   pack(_json(args, list, "--args"), []), pack(_json(kwargs, dict, "--kwargs"), []),
                   _inputs(list(shapes), list(dtypes)), tolerance, config.keras, limits)


async def port(request: Request, runner: Any, state: Path, staged: Path) -> dict:
    """Run both jobs; the report (``status``: equivalent, mismatch, error or usage). The
    checkpoint is written at ``staged/checkpoint`` when the port succeeds."""
    from tern.sandbox.jobs import Job
    from tern.verify.run import link_root

    case = staged.parent / "case"
    case.mkdir(parents=True)
    report: dict[str, Any] = {"status": Status.ERROR, "message": "", "source": str(request.source), "format": request.format,
                              "original": str(request.original), "translated": str(request.translated),
                              "tolerance": request.tolerance, "problems": []}
    limits = request.limits
    tf_root = link_root(state, request.original, request.package)
    payload = {"root": str(tf_root), "package": request.package, "source": str(request.source),
               "format": request.format, "model": request.model, "args": request.args, "kwargs": request.kwargs,
               "inputs": request.inputs, "out": str(case)}
    kind = "tf_keras" if request.keras == "tf_keras" else "tf"
    exported = await runner.run(Job(kind, "tern.verify.weights_tasks:export_keras", payload, (str(tf_root),),
                                    (str(case),), **limits))
    value = _value(exported, "loading the TF model", report)
    if value is None:
        return report
    origin = value["origin"]
    report.update({k: value[k] for k in ("layer", "keras_variables", "inputs", "note")},
                  model={"target": f"{origin['module']}:{origin['name']}", "kind": origin["kind"],
                         "args": unpack(origin["args"], []), "kwargs": unpack(origin["kwargs"], [])})
    jax_root = link_root(state, request.translated, request.package)
    payload = {"case": str(case), "checkpoint": str(staged / CHECKPOINT), "tolerance": request.tolerance}
    ported = await runner.run(Job("jax", "tern.verify.weights_tasks:port_to_flax", payload, (str(jax_root),),
                                  (str(staged),), **limits))
    value = _value(ported, "porting to the translation", report)
    if value is None:
        return report
    checks = value["outputs"]
    report.update(variables=value["variables"], outputs=checks, checkpoint=CHECKPOINT,
                  ported=len(value["variables"]),
                  parameters=sum(math.prod(v["shape"]) for v in value["variables"]),
                  max_abs=max((c.get("max_abs", 0.0) for c in checks), default=0.0),
                  max_rel=max((c.get("max_rel", 0.0) for c in checks), default=0.0))
    report["problems"] = [f"{c['name']}: {c['problem']}" if c.get("problem") else
                          f"{c['name']}: max abs err {c['max_abs']:.2e}, max rel err {c['max_rel']:.2e} "
                          f"beyond rtol {c['rtol']:g}, atol {c['atol']:g}" for c in checks if not c["ok"]]
    report["status"] = Status.EQUIVALENT if all(c["ok"] for c in checks) else Status.MISMATCH
    return report


def _value(result: Any, what: str, report: dict) -> dict | None:
    """The task's value when it succeeded; else None, with the report saying why."""
    if not result.ok:
        last = result.error.strip().splitlines()[-1] if result.error.strip() else ""
        report.update(status=Status.ERROR, message=f"{what}: the job ended ({result.cause}) {last}".strip())
        return None
    value = result.value
    if value["outcome"] != "ok":
        report.update(status=USAGE if value["outcome"] == USAGE else Status.ERROR, message=value["message"],
                      problems=value.get("problems", []))
        return None
    return value


async def port_and_publish(request: Request, *, project: Path, daemon: str) -> dict:
    """The report, with ``--out`` written unless the request turned out unusable."""
    from tern.sandbox.client import open_runner
    from tern.sandbox.daemon import find_project

    state = find_project(project) / ".tern"
    work = state / "weights" / uuid.uuid4().hex
    staged = work / "out"
    staged.mkdir(parents=True)
    try:
        async with open_runner(project, daemon=daemon, writable_roots=(state,)) as runner:
            report = await port(request, runner, state, staged)
        if report["status"] != USAGE:
            if report["status"] == Status.ERROR:  # a job that died while saving leaves no part of it
                shutil.rmtree(staged / CHECKPOINT, ignore_errors=True)
            (staged / REPORT).write_text(json.dumps(report, indent=1))
            publish(staged, request.out)
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)


def exit_code(report: dict) -> int:
    return {Status.EQUIVALENT: 0, USAGE: 2}.get(report["status"], 1)


def summary(report: dict, out: Path) -> list[str]:
    """The lines ``tern weights`` prints."""
    lines = [f"tern weights: {report['source']} ({report['format']})"]
    model = report.get("model")
    if model:
        call = ", ".join([*map(repr, model["args"]), *(f"{k}={v!r}" for k, v in model["kwargs"].items())])
        lines.append(f"  model {model['target']}({call})" + (f", {report['note']}" if report.get("note") else ""))
    if "ported" in report:
        lines.append(f"  {report['ported']} variables ported ({report['parameters']:,} values) "
                     f"from {report['keras_variables']} Keras variables")
        tol = report["tolerance"]
        lines.append(f"  outputs: max abs err {report['max_abs']:.2e}, max rel err {report['max_rel']:.2e} "
                     f"(rtol {tol['rtol']:g}, atol {tol['atol']:g})")
    lines.extend(f"  {p}" for p in report.get("problems", []))
    if report["status"] in (Status.EQUIVALENT, Status.MISMATCH):
        lines.append(f"{report['status']}; weights in {out / CHECKPOINT}, report {out / REPORT}")
    elif report["status"] == Status.ERROR:
        lines.append(f"error; report {out / REPORT}")
    return lines
