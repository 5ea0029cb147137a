"""Validate examples/decoder_block.kina: a pre-norm decoder block (LayerNorm, causal
attention with a Kina-built mask, GELU MLP) and its reverseMode cotangents.

Builds the example at -O0 and -O2 and, from the inputs of its `main`, checks at both
levels:

- the output against a NumPy twin (float64) and, when torch is importable, against
  torch.nn.functional.layer_norm / scaled_dot_product_attention(is_causal=True) / gelu;
- every cotangent of block_grads against torch.autograd (float64) and, always, against
  central finite differences of the NumPy twin along random directions;
- causality: changing the last position of x leaves the outputs of the earlier
  positions bit-identical (masked scores underflow to exactly 0);
- main() = block_grads on main's inputs.

Prints one line per comparison; exits 1 on any mismatch.
"""
from __future__ import annotations

import _examples as E
import numpy as np
from report import Report, section

B, T, D, H, DH = 2, 4, 8, 2, 4
ARGS = ("x", "ln1_g", "ln1_b", "wq", "wk", "wv", "wo", "ln2_g", "ln2_b", "w_up", "w_down")


# ---- the NumPy twin (float64) -----------------------------------------------------------
def _erf(x):
    import math
    return np.vectorize(math.erf)(x)


def _layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def numpy_block(p: dict) -> np.ndarray:
    f = {k: np.asarray(v, np.float64) for k, v in p.items()}
    heads = lambda a: a.reshape(B, T, H, DH).transpose(0, 2, 1, 3)  # noqa: E731
    n1 = _layer_norm(f["x"], f["ln1_g"], f["ln1_b"])
    q, k, v = (heads(n1 @ f[w]) for w in ("wq", "wk", "wv"))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(DH)
    scores = np.where(np.tril(np.ones((T, T), bool)), scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    h = f["x"] + (probs @ v).transpose(0, 2, 1, 3).reshape(B, T, D) @ f["wo"]
    up = _layer_norm(h, f["ln2_g"], f["ln2_b"]) @ f["w_up"]
    return h + 0.5 * up * (1 + _erf(up / np.sqrt(2))) @ f["w_down"]


def torch_block(torch, p: dict):
    F = torch.nn.functional
    t = {k: torch.tensor(np.asarray(v, np.float64), requires_grad=True) for k, v in p.items()}
    heads = lambda a: a.reshape(B, T, H, DH).permute(0, 2, 1, 3)  # noqa: E731
    n1 = F.layer_norm(t["x"], (D,), t["ln1_g"], t["ln1_b"], eps=1e-5)
    q, k, v = (heads(n1 @ t[w]) for w in ("wq", "wk", "wv"))
    ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    h = t["x"] + ctx.permute(0, 2, 1, 3).reshape(B, T, D) @ t["wo"]
    out = h + F.gelu(F.layer_norm(h, (D,), t["ln2_g"], t["ln2_b"], eps=1e-5) @ t["w_up"]) @ t["w_down"]
    out.sum().backward()
    return out.detach().numpy(), {k: t[k].grad.numpy() for k in ARGS}


def fd_direction(p: dict, name: str, v: np.ndarray, h: float = 1e-6) -> float:
    plus, minus = dict(p), dict(p)
    plus[name] = p[name].astype(np.float64) + h * v
    minus[name] = p[name].astype(np.float64) - h * v
    return float((numpy_block(plus).sum() - numpy_block(minus).sum()) / (2 * h))


def check(rep: Report, built: E.Built, torch) -> None:
    p = E.main_inputs(built.program)
    want = numpy_block(p)
    ref = torch_block(torch, p) if torch else None
    rng = np.random.default_rng(0)
    directions = {k: rng.standard_normal(p[k].shape) for k in ARGS}
    fd = {k: fd_direction(p, k, directions[k]) for k in ARGS}
    for level, lib in built.libs.items():
        section(f"-O{level}: forward (B=2, T=4, D=8, H=2, GELU MLP of 16)")
        out = lib.block(*(p[k] for k in ARGS))
        rep.compare("block vs NumPy twin", out, want, atol=2e-5, rtol=1e-5)
        if ref:
            rep.compare("block vs torch.nn.functional", out, ref[0], atol=2e-5, rtol=1e-5)
        changed = dict(p, x=p["x"].copy())
        changed["x"][:, -1] += 1.0
        later = lib.block(*(changed[k] for k in ARGS))
        rep.check("causal: earlier positions bit-identical after changing the last",
                  np.array_equal(later[:, :-1], out[:, :-1]) and not np.array_equal(later[:, -1], out[:, -1]))
        section(f"-O{level}: cotangents of sum(block) (reverseMode)")
        y, *grads = lib.block_grads(*(p[k] for k in ARGS))
        rep.compare("primal = block", y, out, atol=0, rtol=0)
        for k, g in zip(ARGS, grads):
            got, exp = float(np.vdot(g.astype(np.float64), directions[k])), fd[k]
            rep.check(f"d/d {k} . v = finite differences of the NumPy twin",
                      abs(got - exp) <= 1e-4 * (np.abs(g * directions[k]).sum() + 1e-3),
                      f"{got:.6f} vs {exp:.6f}")
            if ref:
                rep.compare(f"d/d {k} vs torch.autograd", g, ref[1][k], atol=2e-5, rtol=1e-4)
        for i, (a, b) in enumerate(zip(lib.main(), (y, *grads))):
            rep.compare(f"main() result {i} = block_grads", a, b, atol=0, rtol=0)


def main() -> int:
    return E.run("decoder_block", check)


if __name__ == "__main__":
    raise SystemExit(main())
