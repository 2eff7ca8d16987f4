"""Regenerate golden translations: python tests/regen_goldens.py [NAME...] (default: all).

Review the diff (git diff fixtures/expected) before committing: a golden file is the
statement that this output is right.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(names: list[str]) -> None:
    fixtures = ROOT / "fixtures" / "tf"
    names = names or sorted(p.name for p in fixtures.iterdir() if (p / "__init__.py").exists())
    for name in names:
        dest = ROOT / "fixtures" / "expected" / name
        shutil.rmtree(dest, ignore_errors=True)
        report = ROOT / "fixtures" / "expected" / f".{name}"
        subprocess.run(
            [sys.executable, "-m", "tern", "migrate", str(fixtures / name), "--out", str(dest), "-q", "--report", str(report)],
            check=False,
        )
        for suffix in (".json", ".md"):
            Path(f"{report}{suffix}").unlink(missing_ok=True)
        for cache in dest.rglob("__pycache__"):
            shutil.rmtree(cache)
        print(f"regenerated fixtures/expected/{name}")


if __name__ == "__main__":
    main(sys.argv[1:])
