"""StoryLM-0 in NumPy, written by hand: the trusted side of every comparison.

`forward` / `backward` implement the decoder of examples/storylm.kina (at StoryLM-0's sizes),
with the backward derived on paper (no autodiff, no Kina interpreter), so that a
bug in the compiler's VJP table cannot hide in the reference.  On top of them:
`mean_nll` (loss and logits cotangent), `nll_grads` (loss and every input's
cotangent) and `sgd_step` (the NumPy twin of storylm0_train_step).

Builds on storylm_data only.  Used by the validation scripts (validate_decoder_ad,
validate_mean_nll, validate_tp_vocab, validate_greedy), gen_example_mains.py,
vocab_parallel_storylm0.py, storylm_train.py and tests/test_storylm0.py.
"""
from __future__ import annotations

import numpy as np
from storylm_data import DH, TRAINABLE, B, D, H, T, inputs


def _softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _swap(a: np.ndarray) -> np.ndarray:
    """Swap the last two axes, keeping the batch prefix (the matmul VJP's transpose)."""
    return np.swapaxes(a, -1, -2)


def _heads(a: np.ndarray) -> np.ndarray:
    """[1, T, D] -> [1, H, T, Dh]."""
    return a.reshape(B, T, H, DH).transpose(0, 2, 1, 3)


def _unheads(a: np.ndarray) -> np.ndarray:
    """[1, H, T, Dh] -> [1, T, D] (inverse of _heads)."""
    return a.transpose(0, 2, 1, 3).reshape(B, T, D)


def forward(p: dict, dtype=np.float64) -> tuple[np.ndarray, dict]:
    """Logits [1, T, V] and the activations `backward` needs."""
    f = {k: (v.astype(dtype) if k != "token_ids" else v) for k, v in p.items()}
    x = f["emb"][f["token_ids"]]                        # gather: [1, T, D]
    q, k, v = _heads(x @ f["wq"]), _heads(x @ f["wk"]), _heads(x @ f["wv"])
    k_t = _swap(k)                                      # [1, H, Dh, T]
    s = q @ k_t                                         # [1, H, T, T]
    probs = _softmax(s * f["scale"] + f["mask"])
    merged = _unheads(probs @ v)
    residual = x + merged @ f["wo"]
    logits = residual @ f["lm_head"]
    cache = dict(x=x, q=q, k_t=k_t, v=v, s=s, probs=probs, merged=merged, residual=residual)
    return logits, cache


def backward(p: dict, cache: dict, g_logits: np.ndarray) -> dict[str, np.ndarray]:
    """Cotangents of every floating input given the logits cotangent (same names as the inputs)."""
    f = {k: v.astype(g_logits.dtype) for k, v in p.items() if k != "token_ids"}
    c = cache
    g = {"lm_head": c["residual"][0].T @ g_logits[0]}
    g_res = g_logits @ f["lm_head"].T
    g["wo"] = c["merged"][0].T @ g_res[0]
    g_heads = _heads(g_res @ f["wo"].T)                 # [1, H, T, Dh]
    g_probs = g_heads @ _swap(c["v"])
    g_v = _swap(c["probs"]) @ g_heads
    # softmax VJP: p * (g - sum(g * p))
    g_z = c["probs"] * (g_probs - (g_probs * c["probs"]).sum(-1, keepdims=True))
    g["mask"] = g_z.sum(axis=1, keepdims=True)          # broadcast [1,1,T,T] -> [1,H,T,T]
    g["scale"] = (g_z * c["s"]).sum().reshape(1, 1, 1, 1)
    g_s = g_z * f["scale"]
    g_q = g_s @ _swap(c["k_t"])
    g_k = _swap(_swap(c["q"]) @ g_s)                    # cotangent of k (not k_t)
    g_x = g_res.copy()
    for name, gh in (("wq", g_q), ("wk", g_k), ("wv", g_v)):
        g_proj = _unheads(gh)                           # [1, T, D]
        g[name] = c["x"][0].T @ g_proj[0]
        g_x += g_proj @ f[name].T
    g_emb = np.zeros_like(f["emb"])
    np.add.at(g_emb, p["token_ids"].reshape(-1), g_x.reshape(-1, D))   # ScatterAdd
    g["emb"] = g_emb
    return g


def mean_nll(logits: np.ndarray, targets: np.ndarray, inv_n: float) -> tuple[float, np.ndarray, float]:
    """(mean NLL, its logits cotangent, d mean / d inv_n)."""
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp, targets, axis=-1)   # [B, T, 1]
    onehot = np.zeros_like(logits)
    np.put_along_axis(onehot, targets, 1.0, axis=-1)
    g_logits = inv_n * (np.exp(logp) - onehot)
    return float(nll.sum() * inv_n), g_logits, float(nll.sum())


def nll_grads(p: dict, targets: np.ndarray, inv_n: float = 1.0 / (B * T), dtype=np.float64):
    """(mean NLL, cotangents of the floating inputs) of the composed program."""
    logits, cache = forward(p, dtype)
    loss, g_logits, g_inv_n = mean_nll(logits, targets, inv_n)
    grads = backward(p, cache, g_logits)
    grads["inv_n"] = np.array([[g_inv_n]])
    return loss, grads


def sgd_step(weights: dict, targets: np.ndarray, ids: np.ndarray, lr: float, dtype=np.float32):
    """One SGD step on every trainable weight (the NumPy twin of storylm0_train_step)."""
    p = dict(inputs(ids, weights))
    loss, g = nll_grads(p, targets, dtype=dtype)
    new = {k: (weights[k] - np.asarray(lr, dtype) * g[k]).astype(np.float32) for k in TRAINABLE}
    return loss, new
