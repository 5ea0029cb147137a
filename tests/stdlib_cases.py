"""The PyTorch reference of each differentiable function of the standard library
(compiler/std/nn.kina, losses.kina), for tests/test_stdlib.py: a Case says how to draw the
function's arguments at given sizes, which size keywords the dynamic export needs, and the
PyTorch (float64) computation it must equal.  torch is imported by the caller (it is
optional); every reference takes it as its first argument."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Sizes = dict[str, int]


@dataclass(frozen=True)
class Case:
    module: str
    torch_name: str                                   # what the doc comment names
    sizes: tuple[Sizes, Sizes]                        # two size assignments
    args: Callable[[Sizes, np.random.Generator], list[np.ndarray]]
    ref: Callable[..., Any]                           # ref(torch, sizes, *tensors) -> tensor
    keywords: tuple[str, ...] = ()                    # sizes the shapes do not determine
    probe: bool = True                                # the grad_ entry weights the output by c
    grad: bool = True                                 # there is a grad_ entry
    no_grad: frozenset[int] = field(default_factory=frozenset)   # float args torch gives no grad


def f32(rng: np.random.Generator, *shape: int, scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
    return (shift + scale * rng.standard_normal(shape)).astype(np.float32)


def rope_tables(t: int, r: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin [T, R] of position t times theta_i = 10000^(-i / R) (the doc comment's)."""
    angle = np.arange(t)[:, None] * 10000.0 ** (-np.arange(r) / r)[None, :]
    return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)


def _heads(a, s: Sizes, e: int):
    return a.reshape(s["B"], s["T"], s["H"], e).transpose(1, 2)


def _merge(a, s: Sizes):
    return a.transpose(1, 2).reshape(s["B"] * s["T"], -1)


def _rope(torch, x, cos, sin):
    """transformers' apply_rotary_pos_emb on one tensor, with the half tables doubled."""
    r = cos.shape[-1]
    rotated = torch.cat([-x[..., r:], x[..., :r]], dim=-1)
    return x * torch.cat([cos, cos], -1) + rotated * torch.cat([sin, sin], -1)


def _mha(torch, s: Sizes, x, wq, bq, wk, bk, wv, bv, wo, bo):
    """F.multi_head_attention_forward (nn.MultiheadAttention's computation) with a causal mask."""
    F = torch.nn.functional
    d = s["H"] * s["E"]
    seq_first = x.reshape(s["B"], s["T"], d).transpose(0, 1)
    mask = torch.ones(s["T"], s["T"], dtype=torch.bool).triu(1)          # True: may not attend
    out, _ = F.multi_head_attention_forward(
        seq_first, seq_first, seq_first, d, s["H"], torch.cat([wq.T, wk.T, wv.T]), torch.cat([bq, bk, bv]),
        None, None, False, 0.0, wo.T, bo, training=False, need_weights=False, attn_mask=mask)
    return out.transpose(0, 1).reshape(s["B"] * s["T"], d)


def _rope_attention(torch, s: Sizes, x, wq, wk, wv, wo, cos, sin):
    F = torch.nn.functional
    e = 2 * s["R"]
    q, k, v = (_heads(x @ w, s, e) for w in (wq, wk, wv))
    ctx = F.scaled_dot_product_attention(_rope(torch, q, cos, sin), _rope(torch, k, cos, sin), v, is_causal=True)
    return _merge(ctx, s) @ wo


def _attention_args(s: Sizes, rng: np.random.Generator) -> list[np.ndarray]:
    d, m = s["H"] * s["E"], s["B"] * s["T"]
    return [f32(rng, m, d)] + [a for _ in range(4) for a in (f32(rng, d, d, scale=0.4), f32(rng, d, scale=0.1))]


def _rope_attention_args(s: Sizes, rng: np.random.Generator) -> list[np.ndarray]:
    d = s["H"] * 2 * s["R"]
    return [f32(rng, s["B"] * s["T"], d), *(f32(rng, d, d, scale=0.4) for _ in range(4)), *rope_tables(s["T"], s["R"])]


def _targets(s: Sizes, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, s["V"], (s["N"], 1))


NN: dict[str, Case] = {
    "linear": Case("nn", "F.linear", ({"M": 3, "K": 4, "N": 5}, {"M": 6, "K": 2, "N": 3}),
                   lambda s, r: [f32(r, s["M"], s["K"]), f32(r, s["K"], s["N"]), f32(r, s["N"])],
                   lambda torch, s, x, w, b: torch.nn.functional.linear(x, w.T, b)),
    "layer_norm": Case("nn", "F.layer_norm", ({"M": 3, "D": 4}, {"M": 5, "D": 7}),
                       lambda s, r: [f32(r, s["M"], s["D"]), f32(r, s["D"], scale=0.1, shift=1), f32(r, s["D"])],
                       lambda torch, s, x, g, b: torch.nn.functional.layer_norm(x, (s["D"],), g, b, eps=1e-5)),
    "rms_norm": Case("nn", "F.rms_norm", ({"M": 3, "D": 4}, {"M": 5, "D": 7}),
                     lambda s, r: [f32(r, s["M"], s["D"]), f32(r, s["D"], scale=0.1, shift=1)],
                     lambda torch, s, x, g: torch.nn.functional.rms_norm(x, (s["D"],), g, eps=1e-6)),
    "gelu_mlp": Case("nn", "F.linear, F.gelu, F.linear", ({"M": 3, "D": 4, "F": 8}, {"M": 2, "D": 3, "F": 5}),
                     lambda s, r: [f32(r, s["M"], s["D"]), f32(r, s["D"], s["F"]), f32(r, s["F"]),
                                   f32(r, s["F"], s["D"]), f32(r, s["D"])],
                     lambda torch, s, x, wu, bu, wd, bd: torch.nn.functional.linear(
                         torch.nn.functional.gelu(torch.nn.functional.linear(x, wu.T, bu)), wd.T, bd)),
    "swiglu_mlp": Case("nn", "F.silu (SwiGLU)", ({"M": 3, "D": 4, "F": 8}, {"M": 2, "D": 3, "F": 5}),
                       lambda s, r: [f32(r, s["M"], s["D"]), f32(r, s["D"], s["F"]), f32(r, s["D"], s["F"]),
                                     f32(r, s["F"], s["D"])],
                       lambda torch, s, x, wg, wu, wd: (torch.nn.functional.silu(x @ wg) * (x @ wu)) @ wd),
    "embedding": Case("nn", "F.embedding", ({"N": 5, "V": 7, "D": 3}, {"N": 2, "V": 3, "D": 6}),
                      lambda s, r: [r.integers(0, s["V"], s["N"]), f32(r, s["V"], s["D"])],
                      lambda torch, s, ids, table: torch.nn.functional.embedding(ids, table)),
    "token_position_embedding": Case(
        "nn", "F.embedding + positions", ({"B": 2, "T": 3, "V": 5, "D": 4}, {"B": 1, "T": 5, "V": 3, "D": 2}),
        lambda s, r: [r.integers(0, s["V"], (s["B"], s["T"])), f32(r, s["V"], s["D"]), f32(r, s["T"], s["D"])],
        lambda torch, s, ids, wte, wpe: (torch.nn.functional.embedding(ids, wte) + wpe).reshape(s["B"] * s["T"], -1)),
    "split_heads": Case("nn", "reshape + transpose", ({"B": 2, "T": 3, "H": 2, "E": 4}, {"B": 1, "T": 4, "H": 3, "E": 2}),
                        lambda s, r: [f32(r, s["B"] * s["T"], s["H"] * s["E"])],
                        lambda torch, s, x: _heads(x, s, s["E"]), keywords=("B", "H"), grad=False),
    "merge_heads": Case("nn", "transpose + reshape", ({"B": 2, "T": 3, "H": 2, "E": 4}, {"B": 1, "T": 4, "H": 3, "E": 2}),
                        lambda s, r: [f32(r, s["B"], s["H"], s["T"], s["E"])],
                        lambda torch, s, x: _merge(x, s), grad=False),
    "causal_sdpa": Case("nn", "F.scaled_dot_product_attention(is_causal=True)",
                        ({"B": 2, "H": 2, "T": 4, "E": 3}, {"B": 1, "H": 3, "T": 5, "E": 2}),
                        lambda s, r: [f32(r, s["B"], s["H"], s["T"], s["E"]) for _ in range(3)],
                        lambda torch, s, q, k, v: torch.nn.functional.scaled_dot_product_attention(
                            q, k, v, is_causal=True)),
    "causal_attention": Case("nn", "F.multi_head_attention_forward (nn.MultiheadAttention)",
                             ({"B": 2, "T": 3, "H": 2, "E": 2}, {"B": 1, "T": 5, "H": 3, "E": 2}),
                             _attention_args, _mha, keywords=("B", "H")),
    "rope": Case("nn", "apply_rotary_pos_emb (rotate_half)", ({"B": 2, "H": 2, "T": 4, "R": 3}, {"B": 1, "H": 3, "T": 6, "R": 2}),
                 lambda s, r: [f32(r, s["B"], s["H"], s["T"], 2 * s["R"]), *rope_tables(s["T"], s["R"])],
                 lambda torch, s, x, cos, sin: _rope(torch, x, cos, sin)),
    "rope_causal_attention": Case("nn", "apply_rotary_pos_emb + F.scaled_dot_product_attention",
                                  ({"B": 2, "T": 3, "H": 2, "R": 2}, {"B": 1, "T": 4, "H": 1, "R": 3}),
                                  _rope_attention_args, _rope_attention),
}

LOSSES: dict[str, Case] = {
    "nll_loss": Case("losses", "F.nll_loss", ({"N": 4, "V": 5}, {"N": 7, "V": 3}),
                     lambda s, r: [f32(r, s["N"], s["V"]), _targets(s, r)],
                     lambda torch, s, logp, t: torch.nn.functional.nll_loss(logp, t[:, 0]).reshape(1, 1), probe=False),
    "cross_entropy": Case("losses", "F.cross_entropy", ({"N": 4, "V": 5}, {"N": 7, "V": 3}),
                          lambda s, r: [f32(r, s["N"], s["V"]), _targets(s, r)],
                          lambda torch, s, x, t: torch.nn.functional.cross_entropy(x, t[:, 0]).reshape(1, 1),
                          probe=False),
    "cross_entropy_rows": Case("losses", "F.cross_entropy(reduction='none')", ({"N": 4, "V": 5}, {"N": 7, "V": 3}),
                               lambda s, r: [f32(r, s["N"], s["V"]), _targets(s, r)],
                               lambda torch, s, x, t: torch.nn.functional.cross_entropy(
                                   x, t[:, 0], reduction="none")[:, None]),
    "cross_entropy_smoothed": Case(
        "losses", "F.cross_entropy(label_smoothing=eps)", ({"N": 4, "V": 5}, {"N": 7, "V": 3}),
        lambda s, r: [f32(r, s["N"], s["V"]), _targets(s, r), np.array([[0.1 + 0.05 * s["V"]]], np.float32)],
        lambda torch, s, x, t, eps: torch.nn.functional.cross_entropy(
            x, t[:, 0], label_smoothing=float(eps.detach())).reshape(1, 1), probe=False, no_grad=frozenset({2})),
    "mse_loss": Case("losses", "F.mse_loss", ({"M": 3, "N": 4}, {"M": 6, "N": 1}),
                     lambda s, r: [f32(r, s["M"], s["N"]), f32(r, s["M"], s["N"])],
                     lambda torch, s, p, t: torch.nn.functional.mse_loss(p, t).reshape(1, 1), probe=False),
}

CASES: dict[str, Case] = {**NN, **LOSSES}
