"""The scaled StoryLM in the peers Kina is measured against: PyTorch eager, torch.compile, jax.jit.

Each `*_impl(w, s)` returns an `Impl`: zero-argument callables per workload
("forward", "train step"; see scaled_model.py), the result of one call of each
(NumPy arrays, checked against the NumPy reference by the caller), and the
compile time.  A peer whose package is not installed (JAX is an optional
benchmark dependency: `make bench-deps`) or that fails to build returns a
`Skipped` with the reason, and its rows are left out.

All peers run their library's default threading (every usable core).  Inputs are
function arguments everywhere (never closure constants a compiler could fold).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scaled_model import WEIGHTS, targets, token_ids


@dataclass
class Impl:
    name: str
    fns: dict[str, Callable[[], object]]
    results: dict[str, object]
    build_s: float | None = None
    note: str = ""
    extra: dict = field(default_factory=dict)


@dataclass
class Skipped:
    name: str
    reason: str


# ---- PyTorch ------------------------------------------------------------------------
def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch_model(torch, w: dict, s: dict):
    """(params, forward(p), loss(p), inputs) over torch tensors of the same inputs."""
    B, T, H, DH, D = s["B"], s["T"], s["H"], s["DH"], s["D"]
    t = {k: torch.from_numpy(np.array(v)) for k, v in w.items()}
    params = {n: t[n].clone().requires_grad_(True) for n in WEIGHTS}
    ids, tgt = torch.from_numpy(token_ids(w, s)), torch.from_numpy(targets(w, s)).reshape(-1)
    heads = lambda a: a.reshape(B, T, H, DH).permute(0, 2, 1, 3)  # noqa: E731

    def forward(p, ids, mask, scale):
        x = p["emb"][ids].reshape(B * T, D)
        q, k, v = (heads(x @ p[n]) for n in ("wq", "wk", "wv"))
        probs = torch.softmax((q @ k.transpose(-1, -2)) * scale + mask, dim=-1)
        merged = (probs @ v).permute(0, 2, 1, 3).reshape(B * T, D)
        return (x + merged @ p["wo"]) @ p["lm_head"]

    def loss(p, ids, tgt, mask, scale, inv_n):
        logits = forward(p, ids, mask, scale)
        return torch.nn.functional.cross_entropy(logits, tgt, reduction="sum") * inv_n[0, 0]

    inputs = dict(ids=ids, tgt=tgt, mask=t["mask"], scale=t["scale"], inv_n=t["inv_n"], lr=t["lr"])
    return params, forward, loss, inputs


def _torch_fns(torch, w, s, compile_fn):
    params, forward, loss, x = _torch_model(torch, w, s)
    fwd_fn, loss_fn = compile_fn(forward), compile_fn(loss)
    plist = [params[n] for n in WEIGHTS]
    B, T = s["B"], s["T"]

    def fwd():
        with torch.no_grad():
            return fwd_fn(params, x["ids"], x["mask"], x["scale"]).reshape(B, T, -1)

    def step():
        value = loss_fn(params, x["ids"], x["tgt"], x["mask"], x["scale"], x["inv_n"])
        grads = torch.autograd.grad(value, plist)
        with torch.no_grad():
            lr = x["lr"][0, 0]
            return (value.detach(), *(p - lr * g for p, g in zip(plist, grads)))

    return fwd, step


def _numpy(result):
    if isinstance(result, tuple):
        return tuple(r.detach().numpy() for r in result)
    return result.detach().numpy()


def _torch_impl(name: str, w: dict, s: dict, compiled: bool) -> Impl | Skipped:
    torch = _torch()
    if torch is None:
        return Skipped(name, "torch not installed")
    t0 = time.perf_counter()
    try:
        fwd, step = _torch_fns(torch, w, s, torch.compile if compiled else (lambda f: f))
        results = {"forward": _numpy(fwd()), "train step": _numpy(step())}   # compiles (torch.compile)
    except Exception as e:   # a peer that fails to build is reported, not fatal
        return Skipped(name, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    build = time.perf_counter() - t0 if compiled else None
    return Impl(name, {"forward": fwd, "train step": step}, results, build,
                f"torch {torch.__version__}, {torch.get_num_threads()} threads")


def torch_eager_impl(w: dict, s: dict) -> Impl | Skipped:
    return _torch_impl("torch eager", w, s, compiled=False)


def torch_compile_impl(w: dict, s: dict) -> Impl | Skipped:
    return _torch_impl("torch.compile", w, s, compiled=True)


# ---- JAX ------------------------------------------------------------------------------
def jax_impl(w: dict, s: dict) -> Impl | Skipped:
    """jax.jit(forward) and jax.jit of value_and_grad + SGD on every weight (one XLA program)."""
    name = "jax.jit"
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return Skipped(name, "jax not installed (optional: `make bench-deps`)")
    B, T, H, DH, D, V = s["B"], s["T"], s["H"], s["DH"], s["D"], s["V"]
    heads = lambda a: a.reshape(B, T, H, DH).transpose(0, 2, 1, 3)  # noqa: E731

    def forward(p, ids, mask, scale):
        x = p["emb"][ids].reshape(B * T, D)
        q, k, v = (heads(x @ p[n]) for n in ("wq", "wk", "wv"))
        probs = jax.nn.softmax((q @ k.swapaxes(-1, -2)) * scale + mask, axis=-1)
        merged = (probs @ v).transpose(0, 2, 1, 3).reshape(B * T, D)
        return (x + merged @ p["wo"]) @ p["lm_head"]

    def loss(p, ids, tgt, mask, scale, inv_n):
        logp = jax.nn.log_softmax(forward(p, ids, mask, scale), axis=-1)
        return -jnp.take_along_axis(logp, tgt.reshape(-1, 1), axis=1).sum() * inv_n[0, 0]

    def step(p, ids, tgt, mask, scale, inv_n, lr):
        value, g = jax.value_and_grad(loss)(p, ids, tgt, mask, scale, inv_n)
        return value, {n: p[n] - lr[0, 0] * g[n] for n in WEIGHTS}

    p = {n: jnp.asarray(w[n]) for n in WEIGHTS}
    ids, tgt = jnp.asarray(token_ids(w, s)), jnp.asarray(targets(w, s))
    mask, scale, inv_n, lr = (jnp.asarray(w[k]) for k in ("mask", "scale", "inv_n", "lr"))
    try:
        t0 = time.perf_counter()
        fwd_c = jax.jit(forward).lower(p, ids, mask, scale).compile()
        step_c = jax.jit(step).lower(p, ids, tgt, mask, scale, inv_n, lr).compile()
        build = time.perf_counter() - t0
    except Exception as e:
        return Skipped(name, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    def fwd():
        return jax.block_until_ready(fwd_c(p, ids, mask, scale))

    def train():
        return jax.block_until_ready(step_c(p, ids, tgt, mask, scale, inv_n, lr))

    value, new = train()
    results = {"forward": np.asarray(fwd()).reshape(B, T, V),
               "train step": (np.asarray(value), *(np.asarray(new[n]) for n in WEIGHTS))}
    return Impl(name, {"forward": fwd, "train step": train}, results, build,
                f"jax {jax.__version__}, {jax.devices()[0].platform}")


def numpy_impl(w: dict, s: dict) -> Impl:
    from scaled_model import np_forward, np_train_step
    fwd = lambda: np_forward(w, s, token_ids(w, s))[0]  # noqa: E731
    step = lambda: np_train_step(w, s)  # noqa: E731
    return Impl("numpy", {"forward": fwd, "train step": step},
                {"forward": fwd(), "train step": step()}, None, f"numpy {np.__version__}")


PEERS = (numpy_impl, torch_eager_impl, torch_compile_impl, jax_impl)
