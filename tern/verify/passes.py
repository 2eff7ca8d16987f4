"""A training loop's dataset, pass by pass: recorded as the test's loop iterates it, handed back
to the copies and to the translation.

A loop (``step_find.py``) that only iterates its dataset (``for x, y in dataset``, once per
epoch) sees one sequence of batches per pass, reshuffled or not. Recording what each pass
yielded while the test's own call runs keeps the test's view unchanged (the same elements,
from the same iterator) and captures exactly the batches the original trained on; the
replays then iterate those passes in order, so a shuffling pipeline is compared too. No
TensorFlow here: the JAX worker imports this module.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

MAX_BYTES = 64 << 20  # recorded whole, so a test-sized dataset only


class RecordingPasses:
    """Stands in for the dataset in the test's call: each ``iter()`` is a pass over the dataset
    itself, whose elements are kept (``to_numpy`` each); past ``MAX_BYTES`` it stops keeping
    them and says so in ``overflow``, and the loop still sees every element."""

    def __init__(self, dataset: Any, to_numpy: Callable[[Any], Any], nbytes: Callable[[Any], int]):
        self.dataset, self._to_numpy, self._nbytes = dataset, to_numpy, nbytes
        self.passes: list[list[Any]] = []
        self.size = 0
        self.overflow = False

    def __iter__(self) -> Iterator[Any]:
        kept: list[Any] = []
        self.passes.append(kept)
        for element in self.dataset:
            if not self.overflow:
                value = self._to_numpy(element)
                self.size += self._nbytes(value)
                self.overflow = self.size > MAX_BYTES
                kept.append(value)
            yield element


class ReplayedPasses:
    """The recorded passes, one per ``iter()``, each element through ``convert``; a pass more than
    were recorded is an error (the replayed loop iterates its data more often than the original)."""

    def __init__(self, passes: list[list[Any]], convert: Callable[[Any], Any] = lambda element: element):
        self.passes, self._convert = passes, convert
        self.count = 0

    def __iter__(self) -> Iterator[Any]:
        if self.count >= len(self.passes):
            raise RuntimeError(f"the loop iterates its dataset a {self.count + 1}th time; the original made "
                               f"{len(self.passes)} pass(es)")
        self.count += 1
        return (self._convert(element) for element in self.passes[self.count - 1])

