"""What a worker's results depend on besides its job: the libraries' versions and tern's own code.

The sandbox checks them where a worker or a Ray node starts (results from other versions
would not be what the cache keys describe); verification hashes them into every key
(``tern/verify/keys.py``).
"""

from __future__ import annotations

import functools
import hashlib
import json
from importlib import metadata
from pathlib import Path

TF_LIBRARIES = ("tensorflow", "tensorflow-cpu", "keras", "tf-keras", "numpy")
JAX_LIBRARIES = ("jax", "jaxlib", "flax", "optax", "numpy", "pytest")


def digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


@functools.cache
def versions(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    found = []
    for name in names:
        try:
            found.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            continue
    return tuple(found)


@functools.cache
def tern_fingerprint() -> str:
    """Hash of tern's code and rule tables: any change to either re-verifies."""
    import tern
    from tern.engine.records import rules_root

    h = hashlib.sha256()
    for root in (Path(tern.__file__).parent, rules_root()):
        for path in sorted(root.rglob("*")):
            if path.suffix in {".py", ".toml"} and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(root)).encode())
                h.update(path.read_bytes())
    return h.hexdigest()
