"""What ``EarlyStopping`` and ``ModelCheckpoint`` share: the monitored log and when a value improves.

Follows keras/src/callbacks/monitor_callback.py: ``mode="min"``/``"max"`` say it, ``"auto"``
reads it from the metric (``loss`` goes down; a compiled metric's direction comes from the
trainer, ``KerasTrainer.metric_direction``, where Keras reads ``metric._direction``), and a
metric with no known direction is an error, as in Keras. A value improves on the reference
when ``value - min_delta`` is below it (``min``) or ``value + min_delta`` above it (``max``),
compared in float32 as Keras' ``ops.less``/``ops.greater`` compare Python floats. Held by
the callbacks (not a base class: every support file runs on its own). Translations import it from the package's generated support module.
"""

import warnings

import numpy


class KerasMonitor:
    """Keras' MonitorCallback logic: which log a callback watches, and what counts as better."""

    def __init__(self, owner, monitor="val_loss", mode="auto", min_delta=0):
        if mode not in ("auto", "min", "max"):
            warnings.warn(f"{owner} mode '{mode}' is unknown, fallback to auto mode.", stacklevel=3)
            mode = "auto"
        self.owner = owner
        self.monitor = monitor
        self.mode = mode
        self.min_delta = abs(min_delta)
        self.monitor_op = None

    def set_monitor_op(self, model):
        """Choose the comparison once the model's metrics are known (Keras waits for them too)."""
        if self.mode == "min":
            self.monitor_op = numpy.less
        elif self.mode == "max":
            self.monitor_op = numpy.greater
        else:
            name = self.monitor.removeprefix("val_")
            if name == "loss":
                self.monitor_op = numpy.less
            direction = model.metric_direction(name) if model is not None else None
            if direction == "up":
                self.monitor_op = numpy.greater
            elif direction == "down":
                self.monitor_op = numpy.less
            if self.monitor_op is None:
                raise ValueError(
                    f"{self.owner} callback received monitor={self.monitor}, but Keras isn't able to "
                    "automatically determine whether that metric should be maximized or minimized. Pass "
                    "`mode='max'` in order to monitor based on the highest metric value, or pass `mode='min'` "
                    "in order to use the lowest value.")
        if self.monitor_op is numpy.less:
            self.min_delta *= -1

    def is_improvement(self, monitor_value, reference_value):
        if reference_value is None:
            return True
        return bool(self.monitor_op(numpy.float32(monitor_value - self.min_delta), numpy.float32(reference_value)))
