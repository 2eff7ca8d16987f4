"""The batches of one ``fit`` / ``evaluate`` / ``predict`` epoch, handed out as Keras does.

Follows keras/src/trainers/epoch_iterator.py and its data adapters (Keras 3):

- arrays (NumPy, JAX, nested in tuples, lists and dicts) are cut in order into
  ``batch_size`` rows (default 32, or ``ceil(n / steps_per_epoch)`` when only the steps are
  given), the last batch partial. ``shuffle=True`` permutes the rows each time the data is
  gone through anew, ``"batch"`` shuffles within each batch. Keras draws the permutation
  from TF's global generator (``keras.utils.set_random_seed``); here it comes from the
  NumPy generator ``rng`` the trainer passes: reproducible for a seed, not Keras' order.
- an object with ``as_numpy_iterator()`` (a tf.data dataset) is gone through afresh each
  epoch (so its own shuffling applies), its elements ``x``, ``(x,)``, ``(x, y)`` or
  ``(x, y, sample_weight)``; its length is ``cardinality()`` when that is finite.
- with ``steps_per_epoch``, an epoch stops after that many batches and the next one
  continues where it stopped; the data is gone through anew once all its batches were
  used, and an epoch that reaches that point early ends there (Keras warns "ran out of data").
- ``packed=True`` hands out each batch as a Keras ``train_step`` receives it: arrays packed
  by ``pack_x_y_sample_weight`` (``x`` alone, ``(x,)`` for a tuple or list ``x``, ``(x, y)``,
  ``(x, y, sample_weight)``), a dataset's elements as they are (lists as tuples).

Translations import it from the package's generated support module.
"""

import math
import warnings

import jax
import numpy


class KerasEpochIterator:
    """Batches ``(x, y, sample_weight)`` for one epoch at a time, as Keras' EpochIterator yields them."""

    def __init__(self, x, y=None, sample_weight=None, batch_size=None, steps_per_epoch=None, shuffle=False, rng=None,
                 packed=False):
        self.steps_per_epoch = steps_per_epoch
        self.packed = packed
        self._iterator = None
        self._seen = 0
        if hasattr(x, "as_numpy_iterator"):
            if y is not None or sample_weight is not None:
                raise ValueError("`y` and `sample_weight` are not accepted with a dataset: it yields them itself")
            self._dataset, self._arrays = x, None
            cardinality = getattr(x, "cardinality", None)
            count = int(cardinality()) if callable(cardinality) else -1
            self.num_batches = count if count >= 0 else None
            return
        self._dataset = None
        self._arrays = jax.tree_util.tree_map(numpy.asarray, (x, y, sample_weight))
        sizes = {a.shape[0] for a in jax.tree_util.tree_leaves(self._arrays)}
        if len(sizes) != 1:
            raise ValueError(f"Data cardinality is ambiguous: the arrays hold {sorted(sizes)} samples")
        self.num_samples = sizes.pop()
        if not batch_size:
            batch_size = math.ceil(self.num_samples / steps_per_epoch) if steps_per_epoch else 32
        self.batch_size = batch_size
        self.num_batches = math.ceil(self.num_samples / batch_size)
        self.shuffle = shuffle
        self.rng = rng if rng is not None else numpy.random.default_rng(0)

    @staticmethod
    def unpack(data):
        """``(x, y, sample_weight)`` from an element ``x``, ``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)``."""
        if isinstance(data, list):
            data = tuple(data)
        if not isinstance(data, tuple):
            return data, None, None
        if len(data) == 1:
            return data[0], None, None
        if len(data) == 2:
            return data[0], data[1], None
        if len(data) == 3:
            return data
        raise ValueError(f"Data is expected to be (x,), (x, y) or (x, y, sample_weight); got a tuple of {len(data)}")

    def first(self):
        """The inputs of the first batch, to build a model from (Keras looks at one batch the same way)."""
        if self._dataset is not None:
            return self.unpack(next(iter(self._dataset.as_numpy_iterator())))[0]
        return jax.tree_util.tree_map(lambda a: a[:self.batch_size], self._arrays[0])

    def _fresh(self):
        if self._dataset is not None:
            if self.packed:
                return (tuple(e) if isinstance(e, list) else e for e in self._dataset.as_numpy_iterator())
            return (self.unpack(element) for element in self._dataset.as_numpy_iterator())
        if self.packed:
            return (self.pack(*batch) for batch in self._array_batches())
        return self._array_batches()

    @staticmethod
    def pack(x, y=None, sample_weight=None):
        """Keras' ``pack_x_y_sample_weight`` (lists as tuples, as Keras' array adapter hands them on)."""
        if isinstance(x, list):
            x = tuple(x)
        if y is None:
            return (x,) if isinstance(x, tuple) else x
        return (x, y) if sample_weight is None else (x, y, sample_weight)

    def _array_batches(self):
        order = numpy.arange(self.num_samples)
        if self.shuffle and self.shuffle != "batch":
            order = self.rng.permutation(self.num_samples)
        for start in range(0, self.num_samples, self.batch_size):
            index = order[start:start + self.batch_size]
            if self.shuffle == "batch":
                index = self.rng.permutation(index)
            yield jax.tree_util.tree_map(lambda a: a[index], self._arrays)

    def epoch(self):
        """``(step, (x, y, sample_weight))`` for the batches of one epoch."""
        steps = self.steps_per_epoch or self.num_batches or -1
        if steps <= 0:
            for step, batch in enumerate(self._fresh()):
                self._seen = step + 1
                yield step, batch
            self.num_batches = self._seen
            return
        if self._iterator is None or self.steps_per_epoch is None:
            self._iterator, self._seen = self._fresh(), 0
        for step in range(steps):
            if self.num_batches and self._seen >= self.num_batches:
                if self.steps_per_epoch:
                    warnings.warn("Your input ran out of data; interrupting training.", stacklevel=2)
                break
            self._seen += 1
            try:
                batch = next(self._iterator)
            except StopIteration:
                if self.num_batches is None:
                    self.num_batches = self._seen - 1
                warnings.warn("Your input ran out of data; interrupting training.", stacklevel=2)
                self._iterator = None
                return
            yield step, batch
        if self.num_batches and self._seen >= self.num_batches:
            self._iterator, self._seen = self._fresh(), 0
