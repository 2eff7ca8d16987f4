"""A Keras metric's name when none is given (``keras.src.utils.naming.auto_name``).

``keras.metrics.Precision()`` is named ``"precision"``, the next one ``"precision_1"``: Keras
keeps one counter per prefix for the process, and logs (``{m.name: m.result()}``) rely on the
names being distinct. An explicit name is kept as given. Used by the metric classes in
rules/support (``KerasMean``, ``KerasPrecision``, ...); translations import it from the package's generated support module.
"""


def keras_metric_name(name, prefix):
    """``name``, or ``prefix`` made unique the way Keras does (``prefix``, ``prefix_1``, ...)."""
    if name is not None:
        return name
    uids = keras_metric_name.__dict__.setdefault("uids", {})
    count = uids.get(prefix, 0)
    uids[prefix] = count + 1
    return prefix if count == 0 else f"{prefix}_{count}"
