"""What ``tf.errors.InvalidArgumentError`` catches, in JAX: ``TypeError``.

TF raises InvalidArgumentError at run time for arguments an op rejects: shapes that do not
concatenate, reshape, broadcast or multiply (``tf.concat``, ``tf.reshape``, ``a + b``,
``tf.matmul``), and failed ``tf.debugging.assert_*`` checks. jax.numpy reports the same shape
errors as TypeError (``jnp.concatenate``, ``jnp.reshape``, broadcasting, ``jnp.matmul``), and
``tf_assert_equal`` raises this name, so ``except tf.errors.InvalidArgumentError`` and
``assertRaises(tf.errors.InvalidArgumentError)`` keep meaning "the op refused its arguments".
It catches more than TF's class (any TypeError, e.g. a wrong Python argument), never less.
"""

TFInvalidArgumentError = TypeError
