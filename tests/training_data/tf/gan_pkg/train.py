"""One WGAN-GP step: a critic update at random interpolates, then a generator update."""

import tensorflow as tf


def gradient_penalty(critic, real, fake):
    alpha = tf.random.uniform([tf.shape(real)[0], 1], 0.0, 1.0)
    interpolated = real + alpha * (fake - real)
    with tf.GradientTape() as gp_tape:
        gp_tape.watch(interpolated)
        scores = critic(interpolated, training=True)
    grads = gp_tape.gradient(scores, [interpolated])[0]
    return tf.reduce_mean((tf.sqrt(tf.reduce_sum(tf.square(grads), axis=1)) - 1.0) ** 2)


@tf.function
def train_step(generator, critic, generator_optimizer, critic_optimizer, real):
    batch_size = tf.shape(real)[0]
    noise = tf.random.normal([batch_size, 2])
    with tf.GradientTape() as tape:
        fake = tf.stop_gradient(generator(noise, training=True))
        wasserstein = tf.reduce_mean(critic(fake, training=True)) - tf.reduce_mean(critic(real, training=True))
        c_loss = wasserstein + 10.0 * gradient_penalty(critic, real, fake)
    c_grads = tape.gradient(c_loss, critic.trainable_variables)
    critic_optimizer.apply_gradients(zip(c_grads, critic.trainable_variables))
    noise = tf.random.normal([batch_size, 2])
    with tf.GradientTape() as tape:
        g_loss = -tf.reduce_mean(critic(generator(noise, training=True), training=True))
    g_grads = tape.gradient(g_loss, generator.trainable_variables)
    generator_optimizer.apply_gradients(zip(g_grads, generator.trainable_variables))
    return {"c_loss": c_loss, "g_loss": g_loss}
