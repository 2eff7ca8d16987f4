"""``tern.verify.variants``: which configurations beyond the tests' a call is tried in.

The recorder and replay that use them run in ``tests/test_verify.py`` (a loop bound and a
constructor argument planted where only a variant reaches)."""

from __future__ import annotations

from tern.verify.variants import LIMIT, accepts, argument_variants


def _packed(*args, **kwargs) -> list:
    return [list(args), {"__dict__": dict(kwargs)}]


def _names(found: list[dict]) -> list[str]:
    return [v["name"] for v in found]


def test_each_parameter_changes_once_before_any_changes_twice():
    def solve(a, tol=1e-6, max_iters=100, flag=True, n=1):
        return a

    found = argument_variants(solve, _packed({"__array__": 0}))
    assert _names(found) == ["max_iters=1", "flag=False", "n=2", "tol=5e-07"]
    assert found[0]["inputs"] == [[{"__array__": 0}], {"__dict__": {"max_iters": 1}}]  # a default passed by keyword
    assert len(found) <= LIMIT


def test_a_passed_value_is_changed_where_it_was_passed():
    def block(x, filters, strides=2):
        return x

    found = argument_variants(block, _packed({"__array__": 0}, 8, strides=1))
    assert found[0] == {"name": "filters=1", "param": "filters",
                        "inputs": [[{"__array__": 0}, 1], {"__dict__": {"strides": 1}}]}
    assert found[1]["inputs"] == [[{"__array__": 0}, 8], {"__dict__": {"strides": 2}}]
    assert _names(found) == ["filters=1", "strides=2", "filters=9", "strides=0"]  # strides=1 was passed: not again


def test_a_class_is_read_from_its_init_whatever_its_new_takes():
    class Layer:
        def __new__(cls, *args, **kwargs):  # as the recorder's wrapper is
            return object.__new__(cls)

        def __init__(self, units, use_bias=True, seed=3, trainable=True, name=None, **kwargs):
            pass

    assert _names(argument_variants(Layer, _packed(4))) == ["units=1", "use_bias=False", "units=5", "units=0"]


def test_later_changes_come_in_rank_order():
    def loop(x, num_iters=50, scale=0.0, widths=(8,), strides=[2, 2], ones=(1, 1)):
        return x

    found = argument_variants(loop, _packed({"__array__": 0}, widths={"__tuple__": [4]}))
    assert _names(found) == ["num_iters=1", "widths=(4, 4)", "strides=[2, 2, 2]", "ones=(1, 1, 1)"]
    assert found[1]["inputs"][1] == {"__dict__": {"widths": {"__tuple__": [4, 4]}}}  # packed as it was
    found = argument_variants(loop, _packed({"__array__": 0}, widths={"__tuple__": [4]}), limit=20)
    assert _names(found)[4:] == ["num_iters=51", "scale=0.5", "widths=(1,)", "strides=[1, 1]", "num_iters=0"]
    assert found[6]["inputs"][1] == {"__dict__": {"widths": {"__tuple__": [1]}}}


def test_nothing_to_change():
    def f(x, mode="max", shape=(1,), pair=(True, 2), training=False, *rest, **options):
        return x

    assert argument_variants(f, _packed({"__array__": 0}, "min", training=True)) == [
        {"name": "shape=(1, 1)", "param": "shape",
         "inputs": [[{"__array__": 0}, "min"], {"__dict__": {"training": True, "shape": {"__tuple__": [1, 1]}}}]}]
    assert argument_variants(max, _packed(1, 2)) == []  # no signature to read: nothing tried


def test_accepts_names_and_keyword_catch_alls():
    def named(x, num_iters=3):
        return x

    def anything(x, **kwargs):
        return x

    assert accepts(named, "num_iters") and not accepts(named, "max_iters")
    assert accepts(anything, "max_iters")
