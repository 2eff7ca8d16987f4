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
