"""StoryLM-0 in PyTorch (optional): the same algebra under torch.autograd.

- `torch_or_none()` imports torch, or returns None when it is not installed;
- `torch_forward` runs the decoder on float64 leaves that require grad;
- `torch_grads` differentiates any loss of the logits with torch.autograd;
- `torch_mean_nll` is the mean next-token NLL as such a loss.

Every function takes the torch module as its first argument, so importing this
module never imports torch.  Builds on storylm_data only.  Used by the
validation scripts (validate_decoder_ad, validate_mean_nll, validate_tp_vocab,
validate_greedy), report.py (the torch banner), train_storylm0.py,
benchmarks/bench_train.py and tests/test_storylm0.py.
"""
from __future__ import annotations

import numpy as np
from storylm_data import DH, B, D, H, T


def torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


def torch_forward(torch, p: dict):
    """The decoder in torch (float64 leaves with requires_grad); returns (logits, leaves)."""
    leaves = {k: torch.tensor(np.asarray(v, np.float64), requires_grad=True)
              for k, v in p.items() if k != "token_ids"}
    ids = torch.tensor(p["token_ids"])
    x = leaves["emb"][ids]

    def heads(a):
        return a.reshape(B, T, H, DH).permute(0, 2, 1, 3)

    q, k, v = heads(x @ leaves["wq"]), heads(x @ leaves["wk"]), heads(x @ leaves["wv"])
    probs = torch.softmax((q @ k.transpose(-1, -2)) * leaves["scale"] + leaves["mask"], dim=-1)
    merged = (probs @ v).permute(0, 2, 1, 3).reshape(B, T, D)
    residual = x + merged @ leaves["wo"]
    return residual @ leaves["lm_head"], leaves


def torch_grads(torch, p: dict, loss_fn) -> tuple[float, dict]:
    """loss_fn(logits, leaves) -> scalar tensor; returns (loss, grads of every leaf)."""
    logits, leaves = torch_forward(torch, p)
    loss = loss_fn(logits, leaves)
    loss.backward()
    return float(loss.detach()), {k: t.grad.numpy() for k, t in leaves.items()}


def torch_mean_nll(torch, targets: np.ndarray):
    tgt = torch.tensor(targets)

    def loss(logits, leaves):
        logp = torch.log_softmax(logits, dim=-1)
        return -(torch.gather(logp, -1, tgt).sum()) * leaves["inv_n"].reshape(())
    return loss
