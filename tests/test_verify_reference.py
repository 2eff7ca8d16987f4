"""The Keras float64 reference (``tern/verify/reference.py``): a translation that sums in
another order than TF is judged against Keras itself in float64 when TF's float32 rounding
is beyond the translation's own; a wrong translation stays a mismatch.

The original adds a row's entries one by one (as TF's naive kernels do), on rows where
float32 loses every small entry behind a 1e8 that cancels at the end; the translation adds
the two big ones first, exactly. In float64 both are exact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ORIGINAL = '''import tensorflow as tf


class RunningTotal(tf.keras.layers.Layer):
    """Each row's total, added entry by entry, times a learned scale."""

    def build(self, input_shape):
        self.scale = self.add_weight(name="scale", shape=(), initializer="ones")

    def call(self, x):
        total = tf.zeros_like(x[:, 0])
        for i in range(x.shape[1]):
            total = total + x[:, i]
        return total * self.scale


class RunningTotalAgain(RunningTotal):
    """The same layer; its translation below drops a term."""
'''

ORIGINAL_TEST = '''import numpy as np
import tensorflow as tf

from totals.layers import RunningTotal, RunningTotalAgain


def rows():
    x = np.ones((2, 258), "float32")
    x[:, 0], x[:, -1] = 1e8, -1e8
    return x


class TotalsTest(tf.test.TestCase):
    def test_shape(self):
        for layer in (RunningTotal(), RunningTotalAgain()):
            self.assertEqual(layer(rows()).shape, (2,))
'''

TRANSLATION = '''import flax.linen as nn
import jax.numpy as jnp


class RunningTotal(nn.Module):
    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, ())
        total = (x[:, 0] + x[:, -1]) + jnp.sum(x[:, 1:-1], axis=1)
        return total * scale


class RunningTotalAgain(nn.Module):
    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, ())
        total = x[:, 0] + jnp.sum(x[:, 1:-1], axis=1)  # planted: the last entry is lost
        return total * scale
'''

TRANSLATED_TEST = '''import numpy as np

from totals.layers import RunningTotal


def test_shape():
    x = np.ones((2, 258), "float32")
    out, _ = RunningTotal().init_with_output({"params": __import__("jax").random.key(0)}, x)
    assert out.shape == (2,)
'''


def _package(root: Path, layers: str, test: str) -> None:
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "layers.py").write_text(layers)
    (root / "layers_test.py").write_text(test)


def test_float32_rounding_of_keras_is_judged_in_float64_and_a_wrong_translation_is_not_excused(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    _package(tmp_path / "totals", ORIGINAL, ORIGINAL_TEST)
    _package(tmp_path / "out" / "totals", TRANSLATION, TRANSLATED_TEST)
    proc = subprocess.run([sys.executable, "-m", "tern", "verify", "out/totals", "--original", "totals",
                           "--daemon", "never", "--json", "r.json"], cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    report = json.loads((tmp_path / "r.json").read_text())
    row = next(r for p in report["packages"] for r in p["rows"] if r["module"] == "totals.layers")
    cases = {c["target"].rpartition(":")[2]: c for c in row["cases"]}
    assert set(cases) == {"RunningTotal", "RunningTotalAgain"}, proc.stdout

    right = cases["RunningTotal"]
    assert right["status"] == "match", (proc.stdout, right)
    settled = {c["name"] for c in right["compared"] if c.get("keras_float64")}
    # TF's float32 total is 0 (every 1 lost behind 1e8), the translation's 256: only float64 settles it
    assert {"output", "d/d scale"} <= settled, right["compared"]

    wrong = cases["RunningTotalAgain"]
    assert wrong["status"] == "mismatch", wrong
    off = next(c for c in wrong["compared"] if c["name"] == "output")
    assert not off["ok"] and off.get("keras_float64") and off["max_abs"] > 1e7, off
    assert row["status"] == "mismatch" and proc.returncode == 1
