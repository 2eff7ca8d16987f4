"""Keras optimizers and losses as source expressions, and their translations as values.

The training replay must build the optax transformation and the loss that tern itself
translates a Keras optimizer or loss to (``rules/api/optimizers.toml``, ``schedules.toml``,
``losses.toml``), never a second, hand-kept mapping. So the TF side renders the object it
saw as the expression that would build it (``tf.keras.optimizers.Adam(learning_rate=0.05)``,
from its class and the ``get_config()`` entries that differ from the constructor's
defaults; nested Keras objects such as schedules likewise), and the JAX side translates
that expression with ``translate_source`` and evaluates the result, as
``tests/test_training_tables.py`` does.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

HEADER = "import tensorflow as tf\nimport keras\n"

#: where a Keras object's class is public, by the kind of object
NAMESPACES = {"optimizer": "tf.keras.optimizers", "loss": "tf.keras.losses", "schedule": "tf.keras.optimizers.schedules"}


class NotRenderable(ValueError):
    """The object has no source form the tables could translate (the reason is the message)."""


def _same(value: Any, default: Any) -> bool:
    """Config floats went through a float32 variable (``0.05`` reads back as
    ``0.05000000074505806``): equal to the default when equal in float32."""
    if isinstance(value, float) and isinstance(default, (int, float)) and not isinstance(default, bool):
        import numpy as np

        return bool(np.float32(value) == np.float32(default)) or (math.isnan(value) and math.isnan(default))
    return type(value) is type(default) and value == default


def _literal(value: Any) -> str:
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotRenderable(f"non-finite config value {value!r}")
        return repr(value)
    if isinstance(value, (list, tuple)):
        items = ", ".join(_literal(v) for v in value)
        return f"[{items}]" if isinstance(value, list) else f"({items}{',' if len(value) == 1 else ''})"
    if isinstance(value, dict) and {"class_name", "config"} <= set(value):
        return _nested(value)
    raise NotRenderable(f"config value {value!r} has no literal form")


def _nested(serialized: dict) -> str:
    """A serialized Keras object inside a config (a learning-rate schedule)."""
    module = str(serialized.get("module") or "")
    if not module.startswith("keras.optimizers.schedules") and not module.startswith("keras.src.optimizers.schedules"):
        raise NotRenderable(f"{serialized['class_name']} (from {module or 'a package'}) is not a Keras built-in "
                            "schedule, which tern's tables translate")
    config = {k: v for k, v in (serialized.get("config") or {}).items() if k != "name"}
    return render("schedule", serialized["class_name"], config, {})


def render(kind: str, class_name: str, config: dict, defaults: dict) -> str:
    """``tf.keras.<kind namespace>.<class_name>(key=value, ...)`` with the config entries
    that differ from ``defaults`` (``name`` never: it changes no number)."""
    args = [f"{key}={_literal(value)}" for key, value in config.items()
            if key != "name" and not (key in defaults and _same(value, defaults[key]))]
    return f"{NAMESPACES[kind]}.{class_name}({', '.join(args)})"


# -- the Keras side (TF worker) ----------------------------------------------------


def keras_class(obj: Any, namespace: str) -> str | None:
    """The public name of ``obj``'s class when it is a Keras built-in (``keras.<namespace>.X``)."""
    import keras

    cls = type(obj)
    return cls.__name__ if getattr(getattr(keras, namespace), cls.__name__, None) is cls else None


def keras_source(obj: Any, kind: str) -> tuple[str, dict]:
    """The expression that builds ``obj`` again, and the config it must rebuild; raises
    NotRenderable with the reason. Pure: nothing is built here (a test may be running)."""
    name = keras_class(obj, {"optimizer": "optimizers", "loss": "losses"}[kind])
    if name is None:
        raise NotRenderable(f"{type(obj).__module__}.{type(obj).__qualname__} is not a Keras built-in {kind}")
    config = obj.get_config()
    defaults = {key: p.default for key, p in inspect.signature(type(obj).__init__).parameters.items()
                if p.default is not inspect.Parameter.empty}
    return render(kind, name, config, defaults), config


def rebuild_problem(source: str, config: dict) -> str:
    """Why ``source`` does not rebuild ``config`` ("" when it does): rendering may lose nothing.
    Builds Keras objects, so it runs after the tests."""
    import tensorflow as tf

    rebuilt = eval(source, {"tf": tf})  # noqa: S307 - an expression rendered from a Keras config
    if {k: v for k, v in rebuilt.get_config().items() if k != "name"} != {k: v for k, v in config.items() if k != "name"}:
        return f"{source} does not rebuild the object's config"
    return ""


# -- the JAX side ---------------------------------------------------------------------


def translated_value(source: str) -> tuple[Any, str]:
    """The value of tern's translation of ``y = <source>``, or ``(None, reason)`` when the
    translation leaves a TODO (the tables do not cover some argument)."""
    from tern.engine.translate import translate_source

    result = translate_source(HEADER + f"y = {source}\n", support_module="tern_rules.support")
    todos = [t for t in result.todos if t.construct != "import tensorflow"]
    if todos or result.todos:
        first = (todos or result.todos)[0]
        return None, f"tern's translation of {source} leaves a TODO ({first.construct}: {first.reason})"
    namespace: dict = {}
    exec(compile(result.code, "<tern translation>", "exec"), namespace)  # noqa: S102 - tern's own output
    return namespace["y"], ""
