"""Keras behaviour written for JAX: the objects translated code calls (``KerasTrainState``,
``keras_loss``, the tests' layer registry, ...).

Each module here is ordinary code with ordinary imports, tested as it stands. ``tern
migrate`` copies exactly the definitions a translated package uses, and what they use in
turn, into one generated module of that package (``tern/engine/support_module.py``), so the
translation never imports tern. Tern's own checks import them from here by name
(``from tern_rules.support import keras_loss``).

Most modules are named after the one definition they hold, so importing them would leave
the module under that name here; every definition is bound last, over its module.
"""

from tern.engine.support_module import objects as _objects

globals().update(_objects())
