"""Scripted LLM answers for ``fixtures/tf/beyond_dynamic_shapes``, which the rules leave
with four untranslated units: right ones, and near misses that verification must catch."""

POSITIVE_VALUES = '''Here is the translation.

```python
import jax.numpy as jnp


def positive_values(x):
    """All strictly positive entries of `x`, flattened (length depends on data)."""
    x = jnp.asarray(x)
    return x[x > 0]
```
'''

# sorted order (jnp.unique's), not order of first appearance (tf.unique's): a test catches it
UNIQUE_COUNTS_WRONG = '''```python
import jax.numpy as jnp


def unique_counts(ids):
    """Unique ids in order of first appearance, and how often each occurs."""
    values, counts = jnp.unique(jnp.asarray(ids), return_counts=True)
    return values, counts
```
'''

UNIQUE_COUNTS = '''The previous answer sorted the values; tf.unique keeps the order of first appearance.

```python
import jax.numpy as jnp


def unique_counts(ids):
    """Unique ids in order of first appearance, and how often each occurs."""
    ids = jnp.asarray(ids)
    values, first, counts = jnp.unique(ids, return_index=True, return_counts=True)
    order = jnp.argsort(first)
    return values[order], counts[order]
```
'''

PREFIX_UNTIL_BUDGET = '''```python
import jax.numpy as jnp


def prefix_until_budget(costs, budget):
    """Longest prefix of `costs` whose running total stays within `budget`."""
    costs = jnp.asarray(costs)
    within = (jnp.cumsum(costs) <= budget).astype(jnp.int32)
    return costs[: int(jnp.sum(jnp.cumprod(within)))]
```
'''

SALIENT_TOKEN_SELECTOR = '''```python
import flax.linen as nn
import jax.numpy as jnp


class SalientTokenSelector(nn.Module):
    """Scores tokens with a Dense layer and keeps those scoring above a threshold."""
    threshold: float = 0.0

    def setup(self):
        self.scorer = nn.Dense(1, kernel_init=nn.initializers.glorot_uniform())

    def __call__(self, inputs, training: bool = False):
        scores = jnp.squeeze(self.scorer(inputs), axis=-1)
        keep = scores > self.threshold
        return inputs[keep], jnp.argwhere(keep)
```
'''

# keeps tokens at or above the threshold: the replayed call with recorded weights differs
SALIENT_TOKEN_SELECTOR_WRONG = SALIENT_TOKEN_SELECTOR.replace("scores > self.threshold", "scores >= self.threshold - 0.5")

RIGHT = {
    "`positive_values`": [{"content": POSITIVE_VALUES}],
    "`unique_counts`": [{"content": UNIQUE_COUNTS}],
    "`prefix_until_budget`": [{"content": PREFIX_UNTIL_BUDGET}],
    "`SalientTokenSelector`": [{"content": SALIENT_TOKEN_SELECTOR}],
}
