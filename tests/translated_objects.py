"""Build one object both ways for the numeric table tests: with Keras from the source
expression, and by executing tern's translation of the same expression."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tern.engine.support_module import objects
from tern.engine.translate import translate_source

HEADER = "import tensorflow as tf\nimport keras\nfrom keras import ops\n"


def keras_object(before: str, prelude: str = ""):
    namespace = {"tf": tf, "keras": keras, "np": np}
    if prelude:
        exec(prelude, namespace)  # noqa: S102 - test code written in this repo
    return eval(before, namespace)  # noqa: S307


def translated_object(before: str, prelude: str = ""):
    """The value of ``y`` in tern's translation of ``prelude`` + ``y = before``, executed."""
    prelude = prelude + "\n" if prelude and not prelude.endswith("\n") else prelude
    result = translate_source(HEADER + prelude + f"y = {before}\n")
    assert not result.todos, f"the translation left TODOs:\n{result.code}"
    namespace: dict = {}
    exec(compile(result.code, "<translation>", "exec"), namespace)  # noqa: S102
    return namespace["y"]


def original_and_translated(source: str) -> tuple[dict, dict, str]:
    """``source`` executed as written (TF) and as tern translates it (JAX), with the translation's code;
    the translation must leave no TODO."""
    original: dict = {}
    exec(compile(source, "<original>", "exec"), original)  # noqa: S102 - test source written in this repo
    result = translate_source(source)
    assert not result.todos, result.code
    translated: dict = objects()  # every support definition, not only those the code imports
    exec(compile(result.code, "<translation>", "exec"), translated)  # noqa: S102
    return original, translated, result.code
