"""The sandbox's PRNG choice: fast keys unless the job's code needs JAX's default."""

import os

from tern.sandbox.prng import FAST, JAX_DEFAULT, needs_threefry, prng_for


def test_a_tree_calling_poisson_needs_threefry_through_a_link_and_after_an_edit(tmp_path):
    tree = tmp_path / "tree" / "pkg"
    tree.mkdir(parents=True)
    module = tree / "heads.py"
    module.write_text("import jax\n\ndef counts(key, rates):\n    return jax.random.normal(key, rates.shape)\n")
    links = tmp_path / "links"
    links.mkdir()
    os.symlink(tree, links / "pkg")  # verify hands workers a directory of links to the trees
    assert not needs_threefry((str(links),))
    module.write_text("import jax\n\ndef counts(key, rates):\n    return jax.random.poisson(key, rates)\n")
    os.utime(module, ns=(1, 1))  # another size and mtime: read again
    assert needs_threefry((str(links),))
    assert not needs_threefry((str(tmp_path / "missing"),))


def test_the_workers_setting_is_restored_after_the_job():
    import jax

    before = jax.config.jax_default_prng_impl
    with prng_for(True) as impl:
        assert impl == JAX_DEFAULT == jax.config.jax_default_prng_impl
        counts = jax.random.poisson(jax.random.key(0), 3.0, (4,))  # rbg keys raise NotImplementedError here
        assert counts.shape == (4,)
    with prng_for(False) as impl:
        assert impl == FAST == jax.config.jax_default_prng_impl
    assert jax.config.jax_default_prng_impl == before


def _key_bits() -> list:
    import jax
    import numpy as np

    out = []
    for impl in ("rbg", "threefry2x32", "unsafe_rbg"):
        key = jax.random.key(42, impl=impl)
        keys = jax.random.split(key, 4)
        with jax.enable_x64(True):
            wide = jax.random.fold_in(key, 2**31 + 5)
        derived = (key, keys, jax.random.fold_in(keys[1], 7), wide, jax.random.split(jax.random.fold_in(key, 3), (2, 3)),
                   jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys))
        out.append([np.asarray(jax.random.key_data(k)).tolist() for k in derived])
        out.append(np.asarray(jax.random.normal(derived[2], (3,))).tolist())
    return out


def test_compiled_key_derivations_give_the_same_bits():
    from jax._src.random import prng as jax_prng  # noqa: PLC2701 - the impls compile_key_derivations replaces

    from tern.sandbox.prng import KEY_DERIVATIONS, compile_key_derivations

    primitives = [getattr(jax_prng, f"{name}_p") for name in KEY_DERIVATIONS]
    python_impls = [p.impl for p in primitives]
    want = _key_bits()
    try:
        assert compile_key_derivations()
        assert all(p.impl is not impl for p, impl in zip(primitives, python_impls))
        assert _key_bits() == want
    finally:
        for primitive, impl in zip(primitives, python_impls):
            primitive.def_impl(impl)
