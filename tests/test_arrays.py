"""Recorded values as JSON plus arrays (tern/verify/arrays.py): what round-trips, what is refused."""

import numpy as np
import pytest

from tern.verify.arrays import Unpackable, array_paths, build, pack, unpack


def test_nested_values_round_trip_with_their_container_kinds():
    value = {"x": np.ones((2, 3), "float32"), "sizes": (32, 16), "levels": [np.zeros(2), None, 1.5]}
    arrays: list = []
    data = pack(value, arrays)
    back = unpack(data, arrays)
    assert back["sizes"] == (32, 16) and back["levels"][1:] == [None, 1.5]
    np.testing.assert_array_equal(back["x"], value["x"])


def test_a_dict_keyed_by_int_levels_round_trips_with_int_keys():
    value = {3: np.ones((1, 8, 8, 4)), 4: np.ones((1, 4, 4, 4)), 5: np.ones((1, 2, 2, 4))}
    arrays: list = []
    data = pack(value, arrays)
    back = unpack(data, arrays)
    assert list(back) == [3, 4, 5] and all(isinstance(k, int) for k in back)
    assert [p for p, _ in array_paths(data)] == ["[3]", "[4]", "[5]"]


def test_paths_come_in_the_order_jax_and_tf_nest_flatten_a_dict_filled_top_down():
    """A feature pyramid fills its outputs from the top level down ({5: ..., 4: ..., 3: ...});
    both flatteners sort the keys, so the recorded values must be compared in that order."""
    import jax

    value = {5: np.full((1, 2, 2, 1), 5.0), 3: np.full((1, 8, 8, 1), 3.0), 4: np.full((1, 4, 4, 1), 4.0)}
    named = {"b": np.ones(1), "a": np.zeros(2)}
    arrays: list = []
    data = pack([value, named], arrays)
    paths = array_paths(data)
    assert [p for p, _ in paths] == ["[0][3]", "[0][4]", "[0][5]", "[1]['a']", "[1]['b']"]
    leaves = jax.tree_util.tree_leaves([value, named])
    assert all(np.array_equal(arrays[i], leaf) for (_, i), leaf in zip(paths, leaves))


@pytest.mark.parametrize("value", [{(1, 2): np.ones(2)}, {True: np.ones(2)}, {1.5: np.ones(2)}])
def test_other_keys_are_refused_with_a_reason(value):
    with pytest.raises(Unpackable, match="keys other than str and int"):
        pack(value, [])


class _Made:
    """A layer as the recorder tags it: how the package built it."""

    def __init__(self, origin: dict):
        self.__dict__["_tern_origin"] = origin


def _origin_of(value):
    origin = getattr(value, "__dict__", {}).get("_tern_origin")
    return origin if origin is not None and "unpackable" not in origin else None


def test_a_layer_the_package_built_is_kept_as_how_to_build_it_and_built_again_first():
    """``VAE(make_encoder(latent_dim=2), make_decoder(2))``: the outer constructor's arguments
    are the inner calls, made again (through ``target``) before the outer one."""
    encoder = _Made({"kind": "factory", "module": "pkg", "name": "make_encoder", "args": [],
                     "kwargs": pack({"latent_dim": 2}, [])})
    decoder = _Made({"kind": "factory", "module": "pkg", "name": "make_decoder", "args": pack([2], []),
                     "kwargs": pack({}, [])})
    args = pack([encoder], [], origin_of=_origin_of)
    kwargs = pack({"decoder": decoder, "beta": 0.5}, [], origin_of=_origin_of)
    assert args == [{"__built__": encoder.__dict__["_tern_origin"]}]
    assert unpack(args, []) == args  # left packed unless the caller builds: a report shows it as it is
    made = []

    def target(origin):
        def make(*a, **k):
            made.append((origin["name"], a, k))
            return origin["name"]
        return make

    outer = {"kind": "class", "module": "pkg", "name": "VAE", "args": args, "kwargs": kwargs}
    assert build(outer, [], target) == "VAE"
    assert made == [("make_encoder", (), {"latent_dim": 2}), ("make_decoder", (2,), {}),
                    ("VAE", ("make_encoder",), {"decoder": "make_decoder", "beta": 0.5})]


def test_a_layer_built_from_arguments_the_recorder_could_not_keep_is_refused():
    inner = _Made({"kind": "class", "module": "pkg", "name": "Block", "unpackable": "constructor arguments: a lambda"})
    with pytest.raises(Unpackable, match="cannot record a _Made"):
        pack([inner], [], origin_of=_origin_of)
    with pytest.raises(Unpackable):
        pack([object()], [], origin_of=_origin_of)
