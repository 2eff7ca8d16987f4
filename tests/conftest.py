"""Suite-wide scheduling: the slowest modules first.

``pytest -n 2 --dist loadfile`` hands whole files to workers in collection order; a
several-minute module collected last would run alone at the end. Moving the slow ones to
the front lets the many quick files fill the other worker meanwhile.

Code these tests translate and run in-process imports its support definitions from
``_keras_compat``, as a translated package imports its generated support module; here tern's
support package stands in for it (tests/test_support_module.py shows the generated module
copies those definitions exactly).
"""

import importlib
import sys
import types


class _Support(types.ModuleType):
    """``_keras_compat`` for code run in-process: tern's support package, imported on first use
    (not in every xdist worker at collection: it imports JAX, Flax, optax and orbax)."""

    def __getattr__(self, name):
        return getattr(importlib.import_module("tern_rules.support"), name)


sys.modules.setdefault("_keras_compat", _Support("_keras_compat"))

SLOW_FIRST = ("test_verify.py", "test_agent.py", "test_sandbox.py", "test_pr.py", "test_eval.py", "test_fixtures.py", "test_weights_cmd.py", "test_ray_executor.py",
              "test_support_module.py", "test_harm_state.py",
              "test_training_verify.py", "test_keras_trainer.py", "test_server.py", "test_tf_data.py",
              "test_training_tables.py", "test_regularizers.py", "test_train_steps.py", "test_layer_cases.py",
              "test_api_cases.py")

#: packages the tests verify (their own TF tests run inside the sandbox, not in this suite)
collect_ignore = ["training_data"]


def pytest_collection_modifyitems(session, config, items):
    def rank(item):
        name = item.path.name
        return SLOW_FIRST.index(name) if name in SLOW_FIRST else len(SLOW_FIRST)

    items.sort(key=rank)  # stable: the order within a file is kept
