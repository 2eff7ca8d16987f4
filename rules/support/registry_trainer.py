"""``compile``/``fit`` in translated tests: the KerasTrainer of a module shares the registry's variables."""

import functools

from .KerasTrainer import KerasTrainer
from .registry import _TERN_ORDER, _TERN_VARIABLES, _tern_variables


def _tern_trainer(module):
    """The module's KerasTrainer (its compile/fit state, shared with package code), with this
    file's registry variables: those are the newest, since the trainer writes every change back."""
    trainer = KerasTrainer.of(module)
    if trainer.variables is None and getattr(module, "tern_input_specs", None) is not None:
        _tern_variables(module)  # a functional Keras model is built from its Inputs at construction
    entry = _TERN_VARIABLES.get(id(module))
    if entry is not None:
        trainer.set_variables(entry[1], order=_TERN_ORDER.get(id(module)))
    elif trainer.variables is not None:
        _tern_keep(module, trainer.variables, trainer.weight_order)
    trainer.on_update = functools.partial(_tern_keep, module)
    return trainer


def _tern_keep(module, variables, order):
    _TERN_VARIABLES[id(module)] = (module, variables)
    _TERN_ORDER.setdefault(id(module), [tuple(p) for p in order])


def _tern_shared(module):
    """``module``, its variables handed to its KerasTrainer (package code is about to compile or fit it)."""
    _tern_trainer(module)
    return module
