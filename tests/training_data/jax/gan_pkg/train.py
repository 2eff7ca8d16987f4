"""One WGAN-GP step: a critic update at random interpolates, then a generator update."""
import jax
import jax.numpy as jnp


def gradient_penalty(state, real, fake):
    alpha = jax.random.uniform(state.draw_key("gradient_penalty:0"), [jnp.shape(real)[0], 1], minval=0.0, maxval=1.0)
    interpolated = real + alpha * (fake - real)
    def gp_tape_target(interpolated):
        scores = state.predict(interpolated, training=True)
        return jnp.sum(scores)
    gp_tape_grads = jax.grad(gp_tape_target)(interpolated)
    grads = [gp_tape_grads][0]
    return jnp.mean((jnp.sqrt(jnp.sum(jnp.square(grads), axis=1)) - 1.0) ** 2)


@jax.jit
def train_step(generator_state, critic_state, real):
    batch_size = jnp.shape(real)[0]
    noise = jax.random.normal(critic_state.draw_key("train_step:0"), [batch_size, 2])
    def compute_c_loss(critic_params):
        critic = critic_state.replace(params=critic_params)
        fake = jax.lax.stop_gradient(generator_state.predict(noise, training=True))
        wasserstein = jnp.mean(critic.predict(fake, training=True)) - jnp.mean(critic.predict(real, training=True))
        c_loss = wasserstein + 10.0 * gradient_penalty(critic, real, fake)
        return c_loss
    c_loss, c_grads = jax.value_and_grad(compute_c_loss)(critic_state.params)
    critic_state = critic_state.apply_gradients(grads=c_grads)
    noise = jax.random.normal(generator_state.draw_key("train_step:1"), [batch_size, 2])
    def compute_g_loss(generator_params):
        generator = generator_state.replace(params=generator_params)
        g_loss = -jnp.mean(critic_state.predict(generator.predict(noise, training=True), training=True))
        return g_loss
    g_loss, g_grads = jax.value_and_grad(compute_g_loss)(generator_state.params)
    generator_state = generator_state.apply_gradients(grads=g_grads)
    return generator_state, critic_state, {"c_loss": c_loss, "g_loss": g_loss}
