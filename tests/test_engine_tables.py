"""Consistency of the engine with its tables (fast, no TF or JAX import)."""

from __future__ import annotations

import re

from tern.engine.convert import CONVERTERS
from tern.engine.package import PackageInfo, scan_source, training_layer_names
from tern.engine.records import load_tables


def test_training_helpers_are_found_from_the_layer_records():
    names = training_layer_names()
    assert {"Dropout", "BatchNormalization"} <= names and "Dense" not in names
    info = PackageInfo()
    source = (
        "from tensorflow.keras import layers\n"
        "def block(x):\n    return layers.Dropout(0.1)(layers.Dense(2)(x))\n"
        "def dense(x):\n    return layers.Dense(2)(x)\n"
        "def explicit(x, training):\n    return layers.Dropout(0.1)(x, training=training)\n"
    )
    scan_source(source, "m", info, names)
    assert info.training_helpers == {"block"}


def test_every_converter_named_in_the_tables_exists():
    tables = load_tables()
    records = [*tables.api.values(), *tables.layers.values()]
    named = {c for r in records for c in r.signature.convert.values()}
    assert named <= set(CONVERTERS), named - set(CONVERTERS)


def test_template_tables_exist():
    tables = load_tables()
    kinds = {k for k, _ in tables.values}
    for record in tables.api.values():
        templates = record.template if isinstance(record.template, list) else [record.template or ""]
        templates = [t["template"] if isinstance(t, dict) else t for t in templates]  # guarded forms too
        for kind in re.findall(r"\{table:(\w+)\}", " ".join(templates)):
            assert kind in kinds, (record.source, kind)


def test_every_record_has_a_target_or_a_template():
    tables = load_tables()
    for record in tables.api.values():
        # a `todo` record is never translated (keras.optimizers.Ftrl): it needs neither; a
        # `constant` record stands for a literal (keras.losses.Reduction.AUTO)
        assert record.target or record.template or record.todo or record.constant is not None, record.source
    for record in tables.layers.values():
        assert record.target or record.template or record.apply, record.source


def test_model_builders_are_found_wherever_a_function_is_defined():
    """Nested in a class, a branch, a handler, a ``match`` case or another function: each
    function that calls ``Model``/``Sequential`` (directly or in a function inside it)."""
    source = '''
import tensorflow as tf

class Factory:
    def build(self):
        return tf.keras.Sequential([])

if tf.__version__:
    def in_branch():
        return tf.keras.Model()
else:
    def plain():
        return 1

try:
    pass
except ImportError:
    def in_handler():
        def inner():
            return tf.keras.Model()
        return inner

match tf.__version__:
    case "2":
        def in_case():
            return tf.keras.Sequential()

with open("x") as f:
    async def in_with():
        return tf.keras.Model()
'''
    info = PackageInfo()
    scan_source(source, "m", info, training_layer_names())
    assert info.model_builders == {"build", "in_branch", "in_handler", "inner", "in_case", "in_with"}


def test_names_spelled_with_other_unicode_letters_are_still_found():
    """The pre-pass skips walks for names a module's text does not hold (``may_name``), but
    Python folds identifiers to NFKC: ``Ｍodel`` (a full-width M) is ``Model``."""
    source = (
        "import tensorflow as tf\n"
        "from tensorflow.keras import layers\n"
        "def build():\n    return tf.keras.\uff2dodel()\n"
        "def block(x):\n    return layers.\uff24ropout(0.1)(x)\n"
    )
    assert "Model" not in source and "Dropout" not in source
    info = PackageInfo()
    scan_source(source, "m", info, training_layer_names())
    assert info.model_builders == {"build"} and info.factories == {"build"}
    assert info.training_helpers == {"block"}
