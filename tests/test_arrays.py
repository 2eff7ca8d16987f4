"""Recorded values as JSON plus arrays (tern/verify/arrays.py): what round-trips, what is refused."""

import numpy as np
import pytest

from tern.verify.arrays import Unpackable, array_paths, pack, unpack


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
