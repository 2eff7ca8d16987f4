"""``[tool.tern]`` settings that verification reads, from the nearest ``pyproject.toml``.

```toml
[tool.tern]
keras = "keras3"              # or "tf_keras" (legacy Keras 2) for the TF side

[tool.tern.verify]
rtol = 1e-5                   # float32 defaults; half precision is looser by default
atol = 1e-5
timeout = 300                 # wall seconds per sandbox job
memory_mb = 6144              # worker memory per job
search_rounds = 2             # gradient-ascent rounds beyond the probes (search.py); 0: off

[tool.tern.verify.tolerances]
"mypkg.layers" = { rtol = 1e-4, atol = 1e-4 }          # a module
"mypkg.layers:Attention" = { rtol = 1e-3 }            # or one class / factory

[tool.tern.verify.training]   # training steps the tests call, replayed on the translated step
steps = 3                     # steps compared per recorded session
rtol = 1e-5                   # on the loss and on every parameter after each step (float32)
atol = 1e-6

[[tool.tern.verify.cases]]    # modules with no tests get cases here
target = "mypkg.layers:Gate"
kwargs = { units = 8 }
inputs = [{ shape = [2, 5, 8], dtype = "float32" }]
training = false
```
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class VerifyConfig:
    keras: str = "keras3"
    rtol: float | None = None
    atol: float | None = None
    timeout: float = 300.0
    memory_mb: int = 6144
    tolerances: dict[str, dict] = field(default_factory=dict)
    cases: tuple[dict, ...] = ()
    train_steps: int = 3
    train_rtol: float = 1e-5
    train_atol: float = 1e-6
    search_rounds: int = 2
    source: str = ""  # the pyproject.toml it came from, or "" for defaults

    def tolerance(self, target: str) -> dict | None:
        """Most specific first: ``module:Name``, then ``module``, then the global one."""
        module = target.partition(":")[0]
        base = {k: v for k, v in (("rtol", self.rtol), ("atol", self.atol)) if v is not None}
        specific = self.tolerances.get(target) or self.tolerances.get(module) or {}
        merged = {**base, **specific}
        return merged or None

    def train_tolerance(self) -> dict:
        return {"rtol": self.train_rtol, "atol": self.train_atol}


class ConfigError(ValueError):
    pass


def find_pyproject(start: Path) -> Path | None:
    for directory in [start, *start.parents]:
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_config(start: Path) -> VerifyConfig:
    path = find_pyproject(start.resolve())
    if path is None:
        return VerifyConfig()
    try:
        data = tomllib.loads(path.read_text()).get("tool", {}).get("tern", {})
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    verify = data.get("verify", {})
    keras = data.get("keras", "keras3")
    if keras not in {"keras3", "tf_keras"}:
        raise ConfigError(f"{path}: [tool.tern] keras must be 'keras3' or 'tf_keras', not {keras!r}")
    training = verify.get("training", {})
    steps = training.get("steps", 3)
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ConfigError(f"{path}: [tool.tern.verify.training] steps must be a positive integer, not {steps!r}")
    rounds = verify.get("search_rounds", VerifyConfig.search_rounds)
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 0:
        raise ConfigError(f"{path}: [tool.tern.verify] search_rounds must be a whole number, not {rounds!r}")
    for case in verify.get("cases", []):
        if ":" not in str(case.get("target", "")) or not isinstance(case.get("inputs", []), list):
            raise ConfigError(f"{path}: each [[tool.tern.verify.cases]] needs target = 'module:Name' and inputs = [...]")
    return VerifyConfig(
        keras=keras, rtol=verify.get("rtol"), atol=verify.get("atol"),
        timeout=float(verify.get("timeout", 300)), memory_mb=int(verify.get("memory_mb", 6144)),
        tolerances=dict(verify.get("tolerances", {})), cases=tuple(verify.get("cases", [])), train_steps=steps,
        search_rounds=rounds,
        train_rtol=float(training.get("rtol", 1e-5)), train_atol=float(training.get("atol", 1e-6)), source=str(path),
    )
