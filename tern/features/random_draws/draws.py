"""Package pre-pass: the top-level functions that draw from TF's global random state.

``tf.random.uniform(shape)`` in a plain function draws from a generator TF keeps for the
whole program; JAX draws only from keys it is given. Such a function gains a keyword-only
``key`` parameter (rules/structure/drawing_functions.py), its i-th draw takes
``jax.random.fold_in(key, i)`` (``FileContext.rng_key``), and its callers pass a key: a
test a fresh ``jax.random.key(n)``, a Flax module method ``self.make_rng(...)``, another
package function a key folded from its own. That last case makes the caller a drawing
function too, so the set is closed over the package's calls.

Only functions of non-test modules, at module level (methods draw from their module's rng
streams). A draw is a call of a TF/Keras symbol whose translation takes a PRNG key (a
``{key}`` in its API record), ``tf.random.Generator`` methods excepted: a generator object
is state the code holds itself (rules/structure/random_generator.py).
"""

from __future__ import annotations

import ast
import functools

from tern.engine.ast_walks import walk as ast_walk
from tern.features.tf_data.datasets import Resolver
from tern.engine.records import tables


@functools.cache
def keyed_sources() -> frozenset[str]:
    """Canonical names of the global-state draws: API records whose translation takes a key."""
    return frozenset(name for name, record in tables().api.items()
                     if "{key}" in str(record.template) and ".Generator." not in name)


def draws_directly(fn: ast.FunctionDef, resolve: Resolver) -> bool:
    """Whether ``fn``'s own body (nested functions and classes included) calls a keyed TF symbol."""
    keyed = keyed_sources()
    return any(isinstance(node, ast.Call) and resolve(node.func) in keyed for node in ast_walk(fn))


def key_is_free(fn: ast.FunctionDef) -> bool:
    """Whether a ``key`` parameter can be added without meaning something else: the function
    neither binds nor reads a ``key`` of its own (``lookup(table, key)``, ``for key in d``, a
    global ``key``), or has the keyword-only ``key`` this translation gave it and never rebinds it."""
    args = fn.args
    own = [a for a in (*args.posonlyargs, *args.args, args.vararg, args.kwarg) if a is not None and a.arg == "key"]
    given = any(a.arg == "key" for a in args.kwonlyargs)
    names = [n for n in ast_walk(fn) if isinstance(n, ast.Name) and n.id == "key"]
    nested = [a for n in ast_walk(fn) if n is not fn and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
              for a in ast_walk(n.args) if isinstance(a, ast.arg) and a.arg == "key"]
    if own or nested:
        return False
    if given:
        return not any(isinstance(n.ctx, ast.Store) for n in names)
    return not names


