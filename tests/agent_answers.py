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

# ``fixtures/tf/spectral_norm_dense``: a Keras layer whose helper method reads build-time
# weights; the rules leave the class, the answer restructures it into a compact module.
SPECTRAL_NORM_DENSE = '''```python
import flax.linen as nn
import jax
import jax.numpy as jnp


class SpectralNormDense(nn.Module):
    """`activation(inputs @ (W / sigma(W)) + b)`, sigma(W) by power iteration."""
    units: int = 32
    activation: object = None
    power_iterations: int = 1
    eps: float = 1e-12

    @nn.compact
    def __call__(self, inputs, training: bool = False):
        in_dim = jnp.shape(inputs)[-1]
        w = self.param("kernel", nn.initializers.glorot_uniform(), (in_dim, self.units))
        bias = self.param("bias", nn.initializers.zeros_init(), (self.units,))
        u_var = self.variable("batch_stats", "u", lambda: nn.initializers.normal(stddev=1.0)(self.make_rng("params"), (1, self.units)))
        u = u_var.value
        for _ in range(self.power_iterations):
            v = u @ w.T
            v = v * jax.lax.rsqrt(jnp.maximum(jnp.sum(jnp.square(v)), self.eps))
            u = v @ w
            u = u * jax.lax.rsqrt(jnp.maximum(jnp.sum(jnp.square(u)), self.eps))
        u = jax.lax.stop_gradient(u)
        v = jax.lax.stop_gradient(v)
        sigma = jnp.squeeze(v @ w @ u.T)
        if training and not self.is_initializing():
            u_var.value = u
        outputs = inputs @ (w / sigma) + bias
        activation = _TERN_ACTIVATIONS.get(self.activation, self.activation)
        return activation(outputs) if activation is not None else outputs
```
'''
