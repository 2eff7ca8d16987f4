"""The defaults no replay uses: a package factory's are compared with its translation's."""

from __future__ import annotations

import flax.linen as nn

from tern.verify.interface import default_checks, keras_defaults


class _KerasModel:
    """What the recorder reads of a Keras model: its ``call``."""

    def call(self, inputs, training=None, mask=None):
        return inputs


def build_model(input_shape=(32, 32, 3), num_classes=10, alpha=1.0, name="mobilenet"):
    return _KerasModel()


class _Translated(nn.Module):
    @nn.compact
    def __call__(self, inputs, training: bool = False):
        return inputs


def test_a_factorys_defaults_are_recorded_and_compared_with_the_translated_factorys():
    recorded = keras_defaults(_KerasModel(), {"kind": "factory", "module": "m", "name": "build_model"}, build_model)
    assert recorded == {"call": {"training": None},
                        "factory": {"input_shape": [32, 32, 3], "num_classes": 10, "alpha": 1.0}}

    def translated(input_shape=(32, 32, 4), num_classes=10, alpha=1.0, name="mobilenet"):
        return _Translated()

    checks = {c["name"]: c for c in default_checks(_Translated(), recorded, translated)}
    assert set(checks) == {"default of training (call)", "default of input_shape (factory)",
                           "default of num_classes (factory)", "default of alpha (factory)"}
    assert [name for name, c in checks.items() if not c["ok"]] == ["default of input_shape (factory)"]
    assert checks["default of input_shape (factory)"]["problem"] == "(32, 32, 4) in the translation, Keras has [32, 32, 3]"
    # the same factory translated faithfully: nothing to report; without the factory, nothing of it compared
    assert all(c["ok"] for c in default_checks(_Translated(), recorded, build_model))
    assert {c["name"] for c in default_checks(_Translated(), recorded)} == {"default of training (call)"}


def test_a_class_origin_records_its_constructor_not_a_factory():
    recorded = keras_defaults(_KerasModel(), {"kind": "class"}, build_model)
    assert "factory" not in recorded and "init" in recorded
