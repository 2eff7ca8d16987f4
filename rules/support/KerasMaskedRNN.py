"""``flax.linen.RNN`` that also takes Keras' ``mask``: a masked step keeps the state.

Keras (keras/src/backend/tensorflow/rnn.py, ``zero_output_for_mask=False``) runs the cell
on every step but, where the mask is off, keeps the previous state and repeats the previous
output (zeros before the first unmasked step), so a padded step anywhere in the sequence
changes nothing and the last output is the last unmasked step's. ``flax.linen.RNN`` only
takes ``seq_lengths`` (right padding, outputs past the end not held). The scan below lifts
the same cell the same way ``flax.linen.RNN`` does, so the parameters keep their path
(``cell/...``) and Keras' weights port unchanged. Without a mask it is ``flax.linen.RNN``.
Translations import it from the package's generated support module.
"""

import flax.linen
import jax


class KerasMaskedRNN(flax.linen.RNN):
    """``flax.linen.RNN`` with Keras' ``mask`` (batch, time): batch-major inputs, outputs in Keras' order."""

    def __call__(self, inputs, *, mask=None, initial_carry=None, **kwargs):
        if mask is None:
            return super().__call__(inputs, initial_carry=initial_carry, **kwargs)
        if self.time_major or self.return_carry or kwargs:
            raise NotImplementedError("KerasMaskedRNN takes batch-major inputs, a mask and initial_carry only")
        keep = jax.numpy.asarray(mask, bool)
        if self.reverse:  # Keras go_backwards reverses inputs and mask and returns the reversed outputs
            inputs, keep = inputs[:, ::-1], keep[:, ::-1]
        carry = initial_carry
        if carry is None:
            carry = self.cell.initialize_carry(jax.random.key(0), inputs[:, 0].shape)

        def step(cell, state, xs):
            carry, previous = state
            x, on = xs
            new_carry, output = cell(carry, x)
            held = jax.tree_util.tree_map(lambda new, old: jax.numpy.where(on[:, None], new, old), new_carry, carry)
            output = jax.numpy.where(on[:, None], output, previous)
            return (held, output), output

        scan = flax.linen.transforms.scan(
            step, in_axes=1, out_axes=1, unroll=self.unroll, variable_axes=self.variable_axes,
            variable_broadcast=self.variable_broadcast, variable_carry=self.variable_carry, split_rngs=self.split_rngs,
        )
        first = jax.numpy.zeros(inputs.shape[:1] + (self.cell.features,), inputs.dtype)
        _, outputs = scan(self.cell, (carry, first), (inputs, keep))
        return outputs
