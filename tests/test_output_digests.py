"""``eval/output_digests.py``: what shows an engine change left every output as it was."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "eval"))

import output_digests  # noqa: E402


def test_the_same_engine_compares_equal_and_one_changed_result_is_named(tmp_path, capsys):
    saved = tmp_path / "before.json"
    assert output_digests.main(["--save", str(saved), "--keras-files", "3"]) == 0
    before = json.loads(saved.read_text())
    assert sum(k.startswith("fixtures/") for k in before) >= 100 and sum(k.startswith("keras/") for k in before) >= 1
    capsys.readouterr()
    assert output_digests.main(["--compare", str(saved), "--keras-files", "3"]) == 0
    assert "0 differ, 0 new, 0 gone" in capsys.readouterr().out

    changed = sorted(before)[0]
    before[changed] = "0" * 64  # as if the engine now translated this file otherwise
    saved.write_text(json.dumps(before))
    assert output_digests.main(["--compare", str(saved), "--keras-files", "3"]) == 1
    out = capsys.readouterr().out
    assert f"differ: {changed}" in out and "1 differ, 0 new, 0 gone" in out
