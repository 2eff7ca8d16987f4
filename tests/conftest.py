"""Suite-wide scheduling (the slowest modules first) and one XLA compilation cache for the suite.

``pytest -n 2 --dist loadfile`` hands whole files to workers; a several-minute module handed
out last would run alone at the end. Moving the slow ones to the front lets the many quick
files fill the other worker meanwhile. xdist (3.6 and later) would otherwise hand files out by
their number of tests, which puts ``test_verify.py`` (few tests, the longest file) near the end,
so its reordering is turned off here and the collection order below is the order files go out.

Code these tests translate and run in-process imports its support definitions from
``_keras_compat``, as a translated package imports its generated support module; here tern's
support package stands in for it (tests/test_support_module.py shows the generated module
copies those definitions exactly).

Many tests verify the same bundled packages, each in its own project. Their sandboxes share one
XLA compilation cache (``TERN_JAX_CACHE``) and one store of the TF side's results
(``TERN_RECORDINGS``), both made here once per run, before xdist starts its workers, which
inherit them: a translation compiled by one test is loaded by the next instead of compiled
again, and an original recorded by one test is not recorded again by the next. The rest of
tern's result cache stays per project: every test still runs every JAX job.
"""

import importlib
import os
import shutil
import sys
import tempfile
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


_SHARED: list[str] = []  # made by this process, removed at its end


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # keep the slowest-first order made below
    for env, prefix in (("TERN_JAX_CACHE", "tern-tests-jax-cache-"), ("TERN_RECORDINGS", "tern-tests-recordings-")):
        if not os.environ.get(env):  # an xdist worker inherits the controller's
            os.environ[env] = tempfile.mkdtemp(prefix=prefix)
            _SHARED.append(os.environ[env])


def pytest_unconfigure(config):
    for path in _SHARED:
        shutil.rmtree(path, ignore_errors=True)


def pytest_collection_modifyitems(session, config, items):
    def rank(item):
        name = item.path.name
        return SLOW_FIRST.index(name) if name in SLOW_FIRST else len(SLOW_FIRST)

    items.sort(key=rank)  # stable: the order within a file is kept
