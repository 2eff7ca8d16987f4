"""Placing Keras units into a Flax init tree: right places, and refusals, never guesses."""

from __future__ import annotations

import numpy as np
import pytest

from tern.verify.graft import flatten, graft


def z(*shape):
    return np.zeros(shape, np.float32)


def dense(i, o, value=1.0):
    return {"params": {"kernel": np.full((i, o), value, np.float32), "bias": np.full((o,), value, np.float32)}}


def test_named_units_land_at_their_attribute_path():
    init = {"params": {"dense1": {"kernel": z(3, 4), "bias": z(4)}, "out": {"kernel": z(4, 2), "bias": z(2)}}}
    tree, problems = graft(init, [
        {"scope": "dense1", "path": "dense1", "layer": "Dense", "tree": dense(3, 4, 1.0)},
        {"scope": "out", "path": "out", "layer": "Dense", "tree": dense(4, 2, 2.0)},
    ])
    assert problems == []
    assert (tree["params"]["dense1"]["kernel"] == 1).all() and (tree["params"]["out"]["bias"] == 2).all()


def test_fused_activation_wrapper_is_looked_through():
    init = {"params": {"dense1": {"layers_0": {"kernel": z(3, 4), "bias": z(4)}}}}
    tree, problems = graft(init, [{"scope": "dense1", "path": "dense1", "layer": "Dense", "tree": dense(3, 4, 5.0)}])
    assert problems == []
    assert (tree["params"]["dense1"]["layers_0"]["kernel"] == 5).all()


def test_regularized_layer_wrapper_is_looked_through_and_its_loss_terms_are_no_weights():
    """``KerasRegularized`` nests a ``setup`` sublayer under ``layer`` and sows loss terms
    into ``losses``: the weights land under ``layer``, the terms are kept as init made them."""
    init = {"params": {"dense1": {"layer": {"kernel": z(3, 4), "bias": z(4)}}},
            "losses": {"dense1": {"kernel_regularizer": z()}}}
    tree, problems = graft(init, [{"scope": "dense1", "path": "dense1", "layer": "Dense", "tree": dense(3, 4, 5.0)}])
    assert problems == []
    assert (tree["params"]["dense1"]["layer"]["kernel"] == 5).all()
    assert set(tree) == {"params", "losses"}


def test_sublayers_of_an_overwritten_constructor_argument_are_found_under_its_underscored_name():
    """``self.lateral_layers = lateral_layers or {2: Conv2D(...)}``: the argument stays a
    Flax field, the sublayers move to ``_lateral_layers`` (rules/structure/keras_class.py);
    the name without the underscore wins when both exist, and a misfit is still reported."""
    init = {"params": {"_lateral_layers_2": {"kernel": z(3, 4), "bias": z(4)},
                       "block": {"_proj": {"kernel": z(4, 2), "bias": z(2)}}}}
    tree, problems = graft(init, [
        {"scope": "lateral_layers_2", "path": "lateral_layers_2", "layer": "Conv2D", "tree": dense(3, 4, 2.0)},
        {"scope": "block/proj", "path": "block/proj", "layer": "Dense", "tree": dense(4, 2, 3.0)},
    ])
    assert problems == []
    assert (tree["params"]["_lateral_layers_2"]["kernel"] == 2).all()
    assert (tree["params"]["block"]["_proj"]["bias"] == 3).all()

    both = {"params": {"out": {"kernel": z(3, 4), "bias": z(4)}, "_out": {"kernel": z(3, 4), "bias": z(4)}}}
    tree, _ = graft(both, [{"scope": "out", "path": "out", "layer": "Dense", "tree": dense(3, 4, 5.0)}])
    assert (tree["params"]["out"]["kernel"] == 5).all() and (tree["params"]["_out"]["kernel"] == 0).all()

    _, problems = graft({"params": {"_out": {"kernel": z(3, 5), "bias": z(5)}}},
                        [{"scope": "out", "path": "out", "layer": "Dense", "tree": dense(3, 4)}])
    assert problems and "Dense at out" in problems[0]


def test_own_variables_merge_beside_submodules():
    init = {"params": {"query": z(4), "proj": {"kernel": z(4, 4), "bias": z(4)}},
            "batch_stats": {"mean": z(4)}}
    tree, problems = graft(init, [
        {"scope": "", "path": "", "layer": "Custom", "own": True,
         "tree": {"params": {"query": np.ones(4, np.float32)}, "batch_stats": {"mean": np.full(4, 3, np.float32)}}},
        {"scope": "proj", "path": "proj", "layer": "Dense", "tree": dense(4, 4, 7.0)},
    ])
    assert problems == []
    assert (tree["batch_stats"]["mean"] == 3).all() and (tree["params"]["proj"]["bias"] == 7).all()


def test_sequential_layers_are_placed_in_order_among_auto_named_submodules():
    init = {"params": {"Dense_0": {"kernel": z(3, 4), "bias": z(4)}, "Dense_1": {"kernel": z(4, 4), "bias": z(4)},
                       "Dense_2": {"kernel": z(4, 4), "bias": z(4)}}}
    units = [{"scope": "", "path": None, "layer": "Dense", "tree": dense(3, 4, 1.0)},
             {"scope": "", "path": None, "layer": "Dense", "tree": dense(4, 4, 2.0)},
             {"scope": "", "path": None, "layer": "Dense", "tree": dense(4, 4, 3.0)}]
    tree, problems = graft(init, units)
    assert problems == []
    assert [float(tree["params"][f"Dense_{i}"]["bias"][0]) for i in range(3)] == [1.0, 2.0, 3.0]


def test_layers_of_a_sequential_flax_gave_to_the_enclosing_module_are_placed_there_in_order():
    """``KerasSequential((nn.Conv(...), nn.BatchNorm()))`` built inside a compact ``__call__``:
    Flax names its layers in the calling module (``Conv_0``), not under the Sequential."""
    init = {"params": {"Dense_0": {"kernel": z(3, 4), "bias": z(4)}, "Dense_1": {"kernel": z(3, 4), "bias": z(4)},
                       "head": {"kernel": z(8, 2), "bias": z(2)}}}
    units = [{"scope": "branches_0", "path": None, "layer": "Dense", "tree": dense(3, 4, 1.0)},
             {"scope": "branches_1", "path": None, "layer": "Dense", "tree": dense(3, 4, 2.0)},
             {"scope": "head", "path": "head", "layer": "Dense", "tree": dense(8, 2, 3.0)}]
    tree, problems = graft(init, units)
    assert problems == []
    assert [float(tree["params"][f"Dense_{i}"]["bias"][0]) for i in range(2)] == [1.0, 2.0]
    _, problems = graft(init, [{**units[0], "tree": dense(3, 5)}, *units[1:]])
    assert any("Dense in branches_0: no unclaimed Flax submodule" in p for p in problems), problems


def test_batchnorm_collections_stay_together():
    init = {"params": {"BatchNorm_0": {"scale": z(4), "bias": z(4)}},
            "batch_stats": {"BatchNorm_0": {"mean": z(4), "var": z(4)}}}
    unit = {"scope": "", "path": None, "layer": "BatchNormalization",
            "tree": {"params": {"scale": np.ones(4, np.float32), "bias": z(4)},
                     "batch_stats": {"mean": z(4), "var": np.full(4, 2, np.float32)}}}
    tree, problems = graft(init, [unit])
    assert problems == []
    assert (tree["batch_stats"]["BatchNorm_0"]["var"] == 2).all()


@pytest.mark.parametrize("units, expected", [
    ([{"scope": "d", "path": "d", "layer": "Dense", "tree": dense(3, 5)}], "no matching Flax variables"),  # shape differs
    ([{"scope": "other", "path": "other", "layer": "Dense", "tree": dense(3, 4)}], "nothing there"),  # wrong name
    ([], "no Keras counterpart"),  # a Flax variable left empty
    ([{"scope": "d", "path": "d", "layer": "Dense", "tree": dense(3, 4)},
      {"scope": "d", "path": "d", "layer": "Dense", "tree": dense(3, 4)}], "no matching Flax variables"),  # claimed twice
    ([{"scope": "", "path": None, "layer": "Dense", "tree": dense(4, 3)}], "no unclaimed Flax submodule"),  # ordered, no fit
])
def test_what_cannot_be_placed_is_reported(units, expected):
    init = {"params": {"d": {"kernel": z(3, 4), "bias": z(4)}}}
    _, problems = graft(init, units)
    assert any(expected in p for p in problems), problems


def test_values_take_the_flax_dtype_and_the_tree_keeps_its_structure():
    init = {"params": {"d": {"kernel": np.zeros((2, 2), np.float16), "bias": np.zeros(2, np.float16)}}}
    tree, problems = graft(init, [{"scope": "d", "path": "d", "layer": "Dense", "tree": dense(2, 2, 0.5)}])
    assert problems == []
    assert tree["params"]["d"]["kernel"].dtype == np.float16
    assert set(flatten(tree)) == set(flatten(init))


def test_functional_layers_land_in_creation_order_per_kind_whatever_the_dict_order():
    """jax rebuilds dicts with sorted keys (``Norm_10`` before ``Norm_2``), and a transposed
    conv's kernel has the shape of a conv's: units go to the same kind of module, in the
    order of the numbers Flax gave them (found on a keras-cv UNet: a 10.2 false mismatch)."""
    names = sorted([f"Norm_{i}" for i in range(12)] + ["Conv_0", "Conv_1", "ConvTranspose_0"])  # jax's order
    init = {"params": {n: {"kernel": z(3, 3, 4, 4)} if n.startswith("Conv") else {"scale": z(4)} for n in names}}
    units = [{"scope": "", "path": None, "layer": "Conv2D", "module": "Conv", "tree": {"params": {"kernel": np.full((3, 3, 4, 4), 1.0, np.float32)}}},
             {"scope": "", "path": None, "layer": "Conv2DTranspose", "module": "ConvTranspose", "tree": {"params": {"kernel": np.full((3, 3, 4, 4), 7.0, np.float32)}}},
             {"scope": "", "path": None, "layer": "Conv2D", "module": "Conv", "tree": {"params": {"kernel": np.full((3, 3, 4, 4), 2.0, np.float32)}}}]
    units += [{"scope": "", "path": None, "layer": "Norm", "module": "Norm", "tree": {"params": {"scale": np.full((4,), float(i), np.float32)}}}
              for i in range(12)]
    tree, problems = graft(init, units)
    assert problems == []
    assert [float(tree["params"][f"Norm_{i}"]["scale"][0]) for i in range(12)] == [float(i) for i in range(12)]
    assert float(tree["params"]["ConvTranspose_0"]["kernel"].max()) == 7.0
    assert float(tree["params"]["Conv_0"]["kernel"].max()) == 1.0 and float(tree["params"]["Conv_1"]["kernel"].max()) == 2.0


def test_keras_units_of_a_functional_model_come_in_creation_order():
    """Keras lists a functional model's layers topologically; the Flax side numbers them in
    the order the code made them. Keras' auto names carry that order per class."""
    import keras

    from tern.verify.port import creation_order

    inputs = keras.Input((4,))
    late = keras.layers.Dense(4)  # made first, called second
    early = keras.layers.Dense(4)
    model = keras.Model(inputs, late(early(inputs)))
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    assert dense == [early, late]  # topological
    assert [layer for layer in creation_order(model.layers) if isinstance(layer, keras.layers.Dense)] == [late, early]


def test_a_value_whose_weights_cannot_be_listed_is_no_layer():
    """TF's tracked containers have a ``weights`` property that walks their items, sorted: on a
    dict keyed by layers (a model built from other models holds one) it raises ``TypeError``."""
    from tern.verify.port import is_layer

    class KeyedByLayers:
        @property
        def weights(self):
            raise TypeError("'<' not supported between instances of 'Functional' and 'VAE'")

    class LayerLike(KeyedByLayers):
        built = True

        def call(self):
            return None

    assert not is_layer(KeyedByLayers()) and not is_layer(LayerLike())
