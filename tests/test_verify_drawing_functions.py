"""Replayed package functions that draw from TF's global random state (``tf.random.*``).

The translation of such a function takes a ``key`` (rules/structure/drawing_functions.py);
the recorder keeps a call only where TF's two runs agreed, so the draws did not decide its
result. The replay then calls the translation with two keys, which must agree, and compares
the result; a translation whose result follows its key where TF's did not is a mismatch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

OPS = '''import tensorflow as tf


def jitter(x, scale):
    """x plus uniform noise of the given scale."""
    return x + scale * tf.random.uniform(tf.shape(x))
'''

OPS_TEST = '''import numpy as np
import tensorflow as tf

from draws.ops import jitter


class JitterTest(tf.test.TestCase):
    def test_no_noise_at_scale_zero(self):
        x = np.arange(6, dtype="float32").reshape(2, 3)
        self.assertAllClose(jitter(x, 0.0), x)
'''


def _tern(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tern", *args], cwd=root, capture_output=True, text=True, timeout=1200)


def _migrated(root: Path, ops: str, test: str) -> Path:
    """The package ``draws`` (``ops`` and its test) migrated: the translated ``ops.py``."""
    (root / "pyproject.toml").write_text("")
    (root / "draws").mkdir()
    (root / "draws" / "__init__.py").write_text("")
    (root / "draws" / "ops.py").write_text(ops)
    (root / "draws" / "ops_test.py").write_text(test)
    assert _tern(root, "migrate", "draws", "--out", "out/draws", "-q").returncode == 0
    return root / "out" / "draws" / "ops.py"


def _row(root: Path) -> dict:
    report = json.loads((root / "r.json").read_text())
    return next(r for p in report["packages"] for r in p["rows"] if r["module"] == "draws.ops")


def test_a_drawing_function_replays_under_two_keys_and_a_key_dependent_translation_is_caught(tmp_path):
    translated = _migrated(tmp_path, OPS, OPS_TEST)
    assert "key" in translated.read_text()

    proc = _tern(tmp_path, "verify", "out/draws", "--daemon", "never", "--json", "r.json")
    row = _row(tmp_path)
    assert (row["status"], row["cases_matched"], row["cases_total"]) == ("equivalent", 1, 1), proc.stdout
    assert "key(0) and key(1) alike" in row["cases"][0].get("note", ""), row["cases"][0]

    # planted: the noise no longer vanishes at scale 0
    text = translated.read_text()
    assert "x + scale * " in text, text
    translated.write_text(text.replace("x + scale * ", "x + (scale + 1e-3) * "))
    proc = _tern(tmp_path, "verify", "out/draws", "--daemon", "never", "--json", "r.json")
    row = _row(tmp_path)
    assert row["status"] == "mismatch" and proc.returncode == 1, proc.stdout
    assert "two keys give the translation different results" in json.dumps(row), row


SAMPLED = '''import tensorflow as tf


def drop_tokens(ids, rate):
    """ids with each token replaced by 0 with probability `rate`, and how many each row kept."""
    keep = tf.random.uniform(tf.shape(ids), maxval=100, dtype=tf.int32) >= tf.cast(rate * 100, tf.int32)
    return tf.where(keep, ids, tf.zeros_like(ids)), tf.reduce_sum(tf.cast(keep, tf.int32), axis=-1)
'''

SAMPLED_TEST = '''import numpy as np
import tensorflow as tf

from draws.ops import drop_tokens


class DropTokensTest(tf.test.TestCase):
    def test_kept_tokens_are_unchanged(self):
        ids = np.arange(1, 33, dtype="int32").reshape(4, 8)
        dropped, kept = drop_tokens(ids, 0.3)
        dropped = np.asarray(dropped)
        self.assertTrue(np.all((dropped == ids) | (dropped == 0)))
        self.assertAllEqual(kept, (dropped != 0).sum(axis=-1))
'''


def test_a_function_drawing_integers_is_compared_as_a_distribution_and_a_wrong_rate_is_caught(tmp_path):
    """Integer draws cannot be injected: TF's calls are kept by the hundred and the
    translation's, under as many keys, must come from the same distribution."""
    translated = _migrated(tmp_path, SAMPLED, SAMPLED_TEST)

    proc = _tern(tmp_path, "verify", "out/draws", "--daemon", "never", "--json", "r.json")
    row = _row(tmp_path)
    assert (row["status"], row["cases_matched"], row["cases_total"]) == ("equivalent", 1, 1), proc.stdout + str(row)
    case = row["cases"][0]
    assert "compared as distributions over 200 calls" in case["note"], case
    assert [c["name"] for c in case["compared"] if "distribution" in c] == ["[0] (distribution)", "[1] (distribution)"]

    # planted: tokens dropped at half the rate; the translated test still passes
    text = translated.read_text()
    assert text.count("rate * 100") == 1, text
    translated.write_text(text.replace("rate * 100", "rate * 50"))
    proc = _tern(tmp_path, "verify", "out/draws", "--daemon", "never", "--json", "r.json")
    row = _row(tmp_path)
    assert row["status"] == "mismatch" and row["tests_failed"] == 0, proc.stdout
    assert "(distribution): distributions differ" in json.dumps(row), row
