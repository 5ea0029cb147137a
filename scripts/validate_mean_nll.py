"""Validate the StoryLM-0 mean NLL (keepdims sums times the size number 1/(B*T)) on compiled host libraries.

Compiles examples/ad_reduce_sum.kina and storylm.kina (StoryLM-0's sizes; its
train_step) to .so files
and checks, against the NumPy reference of scripts/storylm_numpy.py (and torch.autograd
when torch is importable):

- the keepdims sum VJP: step(x) on x : [2, 3] returns (x.sum(axis=1, keepdims), ones[2, 3]);
- the mean NLL step: the mean next-token NLL of the prompt [1, 4, 2, 6] (targets:
  the prompt shifted by one, then token 0: the window [1, 4, 2, 6, 0]); every trainable cotangent, recovered from
  the compiled SGD update with lr = 1 as g = w - w', equals the *sum*-NLL cotangent
  divided by B*T = 4; and the SGD update itself with lr = 0.1.

Prints one line per comparison with its max error; exits 1 on any mismatch.
"""
from __future__ import annotations

import sys

import numpy as np
from report import Report, run_example_checks, section
from storylm_data import LAST_TARGET, PROMPT, B, T, inputs, ordered, targets_for
from storylm_numpy import nll_grads
from storylm_torch import torch_grads, torch_mean_nll

STEP_ARGS = ("window", "emb", "mask", "scale", "wq", "wk", "wv", "wo", "lm_head", "lr")
UPDATED = ("emb", "wq", "wk", "wv", "wo", "lm_head")     # the order of emb', wq', ... in the result


def check_reduce_sum(rep: Report, lib, torch) -> None:
    section("keepdims reduce_sum VJP (ad_reduce_sum.kina): x [2,3], axis 1")
    x = (np.arange(6).reshape(2, 3) / 2 - 1).astype(np.float32)
    y, g_x = lib.step(x)
    rep.compare("y = reduce_keep(op=sum, axis=1) x", y, x.sum(axis=1, keepdims=True))
    rep.compare("g_x = broadcast([2,3], ones[2,1]) = ones[2,3]", g_x, np.ones((2, 3)))
    if torch:
        tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        tx.sum(dim=1, keepdim=True).sum().backward()
        rep.compare("g_x vs torch", g_x, tx.grad.numpy())


def step_inputs(lr: float) -> dict[str, np.ndarray]:
    p = inputs()
    p["targets"] = targets_for(PROMPT)
    p["window"] = np.concatenate([PROMPT, [[LAST_TARGET]]], axis=1).astype(np.int64)   # inputs ++ last target
    p["inv_n"] = np.full((1, 1), 1.0 / (B * T), np.float32)
    p["lr"] = np.full((1, 1), lr, np.float32)
    return p


def check_mean_nll(rep: Report, lib, torch) -> None:
    section("mean NLL + SGD (storylm.kina train_step): prompt [1,4,2,6], targets [4,2,6,0]")
    p = step_inputs(lr=1.0)
    mean, *new = lib.train_step(*ordered(p, STEP_ARGS))
    want_mean, _ = nll_grads(p, p["targets"], inv_n=0.25)
    sum_nll, g_sum = nll_grads(p, p["targets"], inv_n=1.0)
    rep.compare("mean = sum NLL * 1/(B*T)", mean, [[want_mean]])
    rep.compare("mean = sum NLL / (B*T)", mean, [[sum_nll / (B * T)]])
    for name, w2 in zip(UPDATED, new):
        # lr = 1: the compiled update is w - g, so the compiled cotangent is w - w'.
        rep.compare(f"g_{name} (= w - w', lr 1) = sum cotangent / 4", p[name] - w2, g_sum[name] / (B * T),
                    atol=2e-5)
    p = step_inputs(lr=0.1)
    _, *new = lib.train_step(*ordered(p, STEP_ARGS))
    for i, (got, want) in enumerate(zip(lib.main(), (mean, *new))):
        rep.compare(f"main() (literal inputs) result {i} = the step's", got, want, atol=0, rtol=0)
    _, g_mean = nll_grads(p, p["targets"], inv_n=0.25)
    for name, w2 in zip(UPDATED, new):
        rep.compare(f"SGD {name}' = {name} - 0.1 * g_{name}", w2, p[name] - 0.1 * g_mean[name])
    if torch:
        loss, g = torch_grads(torch, {k: v for k, v in p.items() if k not in ("targets", "window", "lr")},
                                torch_mean_nll(torch, p["targets"]))
        rep.compare("mean vs torch", mean, [[loss]])
        for name, w2 in zip(UPDATED, new):
            rep.compare(f"SGD {name}' vs torch", w2, p[name] - 0.1 * g[name])
        rep.compare("NumPy g_inv_n vs torch (unused by the step)", g_mean["inv_n"], g["inv_n"])


def main() -> int:
    return run_example_checks("kina_mean_nll_", (
        ("ad_reduce_sum", check_reduce_sum), ("storylm", check_mean_nll)))

if __name__ == "__main__":
    sys.exit(main())
