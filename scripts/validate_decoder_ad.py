"""Validate the StoryLM-0 decoder VJPs (reshape, transpose, matmul, gather, the SGD step) on compiled host libraries.

Compiles examples/ad_reshape.kina, ad_matmul4.kina, ad_gather.kina and
storylm.kina (StoryLM-0's sizes; its embedding_step) to .so files (compiler.build), calls them through
compiler.runtime.library with the deterministic weights, and compares every result with

- the NumPy reference of scripts/storylm_numpy.py (forward and hand-written backward), and
- torch.autograd on the same algebra, when torch is importable.

The embedding SGD step runs on the prompt [1, 4, 2, 6] and on [1, 4, 1, 4], whose
repeated tokens make ScatterAdd accumulate two positions into one row.
Prints one line per comparison with its max error; exits 1 on any mismatch.
"""
from __future__ import annotations

import sys

import numpy as np
from report import Report, run_example_checks, section
from storylm_data import PROMPT, V, inputs, load_weights, ordered
from storylm_numpy import backward, forward
from storylm_torch import torch_grads

REPEATED = np.array([[1, 4, 1, 4]], dtype=np.int64)
LR = 0.1


def check_reshape(rep: Report, lib, torch) -> None:
    section("reshape VJP (ad_reshape.kina): g_x = reshape(g, shape(x))")
    x = forward(inputs())[1]["x"].astype(np.float32)
    w = ((np.arange(16) + 1) / 10).reshape(1, 4, 2, 2).astype(np.float32)
    rep.compare("step: g_x = reshape(ones[1,4,2,2], [1,4,4])", lib.step(x), np.ones((1, 4, 2, 2)).reshape(1, 4, 4))
    g_x, g_w = lib.step_weighted(x, w)
    rep.compare("step_weighted: g_x = reshape(w, [1,4,4])", g_x, w.reshape(1, 4, 4))
    rep.compare("step_weighted: g_w = reshape(x, [1,4,2,2])", g_w, x.reshape(1, 4, 2, 2))
    if torch:
        tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        (tx.reshape(1, 4, 2, 2) * torch.tensor(w, dtype=torch.float64)).sum().backward()
        rep.compare("step_weighted: g_x vs torch", g_x, tx.grad.numpy())


def check_matmul4(rep: Report, lib, torch) -> None:
    section("rank-4 matmul VJP (ad_matmul4.kina): [1,2,4,2] @ [1,2,2,4]")
    cache = forward(inputs())[1]
    q, k_t = (np.round(cache[n], 2).astype(np.float32) for n in ("q", "k_t"))
    s, g_q, g_k_t = lib.step(q, k_t)
    ones = np.ones((1, 2, 4, 4))
    rep.compare("scores = q @ k_t", s, q.astype(np.float64) @ k_t)
    rep.compare("g_q = ones @ transpose_last_two(k_t)", g_q, ones @ np.swapaxes(k_t, -1, -2))
    rep.compare("g_k_t = transpose_last_two(q) @ ones", g_k_t, np.swapaxes(q, -1, -2) @ ones)
    if torch:
        tq, tk = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k_t))
        (tq @ tk).sum().backward()
        rep.compare("g_q vs torch", g_q, tq.grad.numpy())
        rep.compare("g_k_t vs torch", g_k_t, tk.grad.numpy())


def scatter_rows(ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """out[v] = sum of rows[t] over the positions t with ids[t] = v, written as a loop."""
    out = np.zeros((V, rows.shape[-1]))
    for t, v in enumerate(ids.reshape(-1)):
        out[v] += rows.reshape(-1, rows.shape[-1])[t]
    return out


def check_gather(rep: Report, lib, torch) -> None:
    section("gather VJP (ad_gather.kina): ScatterAdd into [8, 4]; token_ids has no cotangent")
    emb = load_weights()["emb"]
    w = ((np.arange(16) + 1) / 10).reshape(1, 4, 4).astype(np.float32)
    rep.check("I64 token_ids absent from the reverseMode tuple", "step" in lib and lib.step(emb, PROMPT).shape == (8, 4),
              "(x, g_emb) destructures; g_emb : [8, 4]")
    for label, ids in (("prompt [1,4,2,6]", PROMPT), ("repeated [1,4,1,4]", REPEATED)):
        rep.compare(f"{label}: g_emb = row counts", lib.step(emb, ids), scatter_rows(ids, np.ones((1, 4, 4))))
        got = lib.step_weighted(emb, ids, w)
        rep.compare(f"{label}: weighted g_emb = ScatterAdd(w, ids)", got, scatter_rows(ids, w))
        if torch:
            te = torch.tensor(emb, dtype=torch.float64, requires_grad=True)
            (te[torch.tensor(ids)] * torch.tensor(w, dtype=torch.float64)).sum().backward()
            rep.compare(f"{label}: weighted g_emb vs torch", got, te.grad.numpy())


def check_sgd(rep: Report, lib, torch) -> None:
    section("embedding SGD step (storylm.kina embedding_step): emb - lr * d(sum logits)/d emb")
    lr = np.full((1, 1), LR, np.float32)
    for label, ids in (("prompt [1,4,2,6]", PROMPT), ("repeated [1,4,1,4]", REPEATED)):
        p = inputs(ids)
        logits, cache = forward(p)
        rep.compare(f"{label}: forward logits", lib.forward(*ordered(p)), logits)
        g_emb = backward(p, cache, np.ones_like(logits))["emb"]
        want = p["emb"] - LR * g_emb
        got = lib.embedding_step(*ordered(p), lr)
        rep.compare(f"{label}: emb' (NumPy hand-written backward)", got, want)
        rep.check(f"{label}: unused rows of emb unchanged",
                  bool(np.array_equal(np.delete(got, ids.reshape(-1), 0), np.delete(p["emb"], ids.reshape(-1), 0))),
                  f"rows {sorted(set(range(V)) - set(ids.reshape(-1).tolist()))}")
        if torch:
            _, g = torch_grads(torch, p, lambda logits, leaves: logits.sum())
            rep.compare(f"{label}: emb' vs torch", got, p["emb"] - LR * g["emb"])


def main() -> int:
    return run_example_checks("kina_decoder_ad_", (
        ("ad_reshape", check_reshape), ("ad_matmul4", check_matmul4),
        ("ad_gather", check_gather), ("storylm", check_sgd)))

if __name__ == "__main__":
    sys.exit(main())
