"""compiler.interop.jax_function (issue 28): jax.test_util.check_grads and jax.grad under
jax.jit for an MLP, the decoder block and a gather embedding (skipped without JAX).  JAX
runs in float32 here (no jax_enable_x64): check_grads with float32's step and tolerances.
One -O0 build per function and process (compiler.interop caches), as in test_interop_torch."""
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
from interop_sources import DECODER_PARAMS, DECODER_SHAPES, EMBED, MLP, decoder  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

from compiler.interop import jax_function  # noqa: E402

pytestmark = pytest.mark.both_levels
O0 = 0


def _mlp_ref(x, w1, b1, w2):
    return jnp.tanh(x @ w1 + b1) @ w2


def _rand(rng, shape, scale=0.5):
    return jnp.asarray(rng.standard_normal(shape).astype(np.float32) * scale)


def test_mlp_jit_grad_and_check_grads():
    f = jax_function(MLP, "mlp", opt_level=O0)
    rng = np.random.default_rng(0)
    args = [_rand(rng, s) for s in ((4, 3), (3, 5), (5,), (5, 2))]
    np.testing.assert_allclose(jax.jit(f)(*args), _mlp_ref(*args), atol=2e-5, rtol=1e-4)

    def loss(fn):
        return lambda *a: jnp.sum(jnp.sin(fn(*a)))
    got = jax.jit(jax.grad(loss(f), argnums=(0, 1, 2, 3)))(*args)
    want = jax.grad(loss(_mlp_ref), argnums=(0, 1, 2, 3))(*args)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, atol=5e-5, rtol=1e-4)
    check_grads(f, args, order=1, modes=["rev"], eps=1e-2, atol=2e-2, rtol=2e-2)


def test_embedding_int_indices():
    """ids stay int32 under JAX's default (no x64); the bridge widens them for the I64 parameter,
    and they get no cotangent."""
    f = jax_function(EMBED, "embed", opt_level=O0)
    rng = np.random.default_rng(1)
    emb, w = _rand(rng, (8, 4)), _rand(rng, (2, 3, 4))
    ids = jnp.asarray([[1, 4, 1], [6, 0, 4]])
    np.testing.assert_allclose(f(emb, ids, w), emb[ids] * w, rtol=1e-6)
    g_emb = jax.jit(jax.grad(lambda e: jnp.sum(f(e, ids, w) ** 2)))(emb)
    np.testing.assert_allclose(g_emb, jax.grad(lambda e: jnp.sum((e[ids] * w) ** 2))(emb), atol=1e-5, rtol=1e-5)
    check_grads(lambda e, w: f(e, ids, w), (emb, w), order=1, modes=["rev"], eps=1e-2, atol=2e-2, rtol=2e-2)


def test_decoder_block_check_grads():
    f = jax_function(decoder(), "block", opt_level=O0)
    rng = np.random.default_rng(2)
    args = [_rand(rng, DECODER_SHAPES[n], 1.0 if n == "x" else 0.35) + (1.0 if n.endswith("_g") else 0.0)
            for n in DECODER_PARAMS]
    check_grads(f, args, order=1, modes=["rev"], eps=1e-2, atol=3e-2, rtol=3e-2)
