"""The scaled StoryLM (examples/storylm.kina at larger sizes): sizes, the build, inputs, FLOPs, the NumPy reference.

Every implementation in bench_scaled.py (compiled Kina, NumPy, PyTorch eager,
torch.compile, jax.jit) computes the same two workloads from the same inputs:

- `forward`: logits [B, T, V] of the one-layer causal decoder;
- `train step`: mean next-token NLL, its gradient with respect to every weight,
  and one SGD step: (loss, emb', wq', wk', wv', wo', lm_head').

Each call computes the step from the same weights (nothing is carried over between
calls), so every call does the same work.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from compiler.runtime import arrays

ROOT = Path(__file__).resolve().parent.parent
STORYLM = ROOT / "examples" / "storylm.kina"     # the generic model, built with --size
MATMUL = ROOT / "benchmarks" / "matmul.kina"      # fn mm[M, K, N]
# The functions the benchmarks call (the build compiles only these and what they call).
EXPORTS = ("forward", "train_step")
WEIGHTS = ("emb", "wq", "wk", "wv", "wo", "lm_head")
LR = 0.1
# Named configurations (B, T, D, H, V): the scaled model and a larger one.
CONFIGS = {
    "scaled": (4, 64, 256, 8, 2048),
    "large": (4, 128, 512, 8, 8192),
}


def sizes(B: int, T: int, D: int, H: int, V: int) -> dict[str, int]:
    if D % H:
        raise SystemExit(f"D={D} must be a multiple of H={H}")
    return {"B": B, "T": T, "D": D, "H": H, "DH": D // H, "V": V, "BT": B * T, "T1": T + 1}


def describe(s: dict) -> str:
    return f"B={s['B']} T={s['T']} D={s['D']} H={s['H']} V={s['V']}"


def kina_sizes(s: dict) -> dict[str, int]:
    """The `--size` values of examples/storylm.kina (D is H * DH there)."""
    return {k: s[k] for k in ("B", "T", "H", "DH", "V")}


def build(s: dict, out_so: Path, opt_level: int, timings: dict | None = None, cache: bool | None = False,
          exports=EXPORTS):
    """examples/storylm.kina built at sizes s (only `exports` and what they call); the BuildResult."""
    from compiler import build as kb
    return kb.build_file(STORYLM, out_so, opt_level, timings, transform=kb.keep_exports(exports),
                         cache=cache, sizes=kina_sizes(s))


def params(s: dict) -> int:
    """Trainable weights: emb [V, D], wq/wk/wv/wo [D, D], lm_head [D, V]."""
    return 2 * s["V"] * s["D"] + 4 * s["D"] * s["D"]


def flops(s: dict) -> dict[str, float]:
    """Matmul FLOPs (2 M N K per product) of each workload.  The backward pass of every
    product is two products of the same size (the gradients of both operands), so the
    train step is 3x the forward.  Elementwise work and softmax are not counted."""
    BT, D, V, B, H, T, DH = (s[k] for k in ("BT", "D", "V", "B", "H", "T", "DH"))
    fwd = 4 * 2 * BT * D * D + 2 * (2 * B * H * T * T * DH) + 2 * BT * D * V
    return {"forward": float(fwd), "train step": 3.0 * fwd}


def _aligned(a: np.ndarray) -> np.ndarray:
    out = arrays.empty(a.shape, a.dtype)
    out[...] = a
    return out


def make_inputs(s: dict, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    D, V, T = s["D"], s["V"], s["T"]
    w = {"emb": rng.normal(0, 0.5, (V, D)), "lm_head": rng.normal(0, D ** -0.5, (D, V))}
    for n in ("wq", "wk", "wv", "wo"):
        w[n] = rng.normal(0, D ** -0.5, (D, D))
    # 64-byte aligned, as torch's and JAX's copies of them are (compiler/runtime/arrays.py)
    w = {k: _aligned(v.astype(np.float32)) for k, v in w.items()}
    w["window"] = rng.integers(0, V, (s["B"], T + 1)).astype(np.int64)
    w["mask"] = np.triu(np.full((T, T), -1.0e4, np.float32), 1).reshape(1, 1, T, T)
    w["scale"] = np.full((1, 1, 1, 1), s["DH"] ** -0.5, np.float32)
    w["inv_n"] = np.full((1, 1), 1.0 / (s["B"] * T), np.float32)
    w["lr"] = np.full((1, 1), LR, np.float32)
    return w


def token_ids(w: dict, s: dict) -> np.ndarray:
    return np.ascontiguousarray(w["window"][:, :s["T"]])


def targets(w: dict, s: dict) -> np.ndarray:
    return np.ascontiguousarray(w["window"][:, 1:])


# ---- NumPy (float32, backward written by hand) ------------------------------------------
def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_forward(w: dict, s: dict, ids: np.ndarray):
    B, T, H, DH, D = s["B"], s["T"], s["H"], s["DH"], s["D"]
    heads = lambda a: a.reshape(B, T, H, DH).transpose(0, 2, 1, 3)  # noqa: E731
    x = w["emb"][ids].reshape(B * T, D)
    q, k, v = heads(x @ w["wq"]), heads(x @ w["wk"]), heads(x @ w["wv"])
    probs = _softmax((q @ k.swapaxes(-1, -2)) * w["scale"] + w["mask"])
    merged = (probs @ v).transpose(0, 2, 1, 3).reshape(B * T, D)
    residual = x + merged @ w["wo"]
    logits = residual @ w["lm_head"]
    return logits.reshape(B, T, -1), dict(x=x, q=q, k=k, v=v, probs=probs, merged=merged, residual=residual)


def np_train_step(w: dict, s: dict):
    B, T, H, DH, D = s["B"], s["T"], s["H"], s["DH"], s["D"]
    heads = lambda a: a.reshape(B, T, H, DH).transpose(0, 2, 1, 3)  # noqa: E731
    unheads = lambda a: a.transpose(0, 2, 1, 3).reshape(B * T, D)  # noqa: E731
    ids, tgt = token_ids(w, s), targets(w, s).reshape(-1)
    logits, c = np_forward(w, s, ids)
    logits = logits.reshape(B * T, -1)
    inv_n = w["inv_n"][0, 0]
    p = _softmax(logits)
    rows = np.arange(B * T)
    loss = -np.log(p[rows, tgt]).sum() * inv_n
    g_logits = p
    g_logits[rows, tgt] -= 1.0
    g_logits *= inv_n
    g = {"lm_head": c["residual"].T @ g_logits}
    g_res = g_logits @ w["lm_head"].T
    g["wo"] = c["merged"].T @ g_res
    g_heads = heads(g_res @ w["wo"].T)
    g_probs = g_heads @ c["v"].swapaxes(-1, -2)
    g_v = c["probs"].swapaxes(-1, -2) @ g_heads
    g_s = c["probs"] * (g_probs - (g_probs * c["probs"]).sum(-1, keepdims=True)) * w["scale"]
    g_q, g_k = g_s @ c["k"], g_s.swapaxes(-1, -2) @ c["q"]
    g_x = g_res
    for name, gh in (("wq", g_q), ("wk", g_k), ("wv", g_v)):
        flat = unheads(gh)
        g[name] = c["x"].T @ flat
        g_x = g_x + flat @ w[name].T
    g["emb"] = np.zeros_like(w["emb"])
    np.add.at(g["emb"], ids.reshape(-1), g_x)
    lr = w["lr"][0, 0]
    return (np.asarray(loss, w["emb"].dtype), *(w[n] - lr * g[n] for n in WEIGHTS))


def max_error(got, want) -> float:
    """max |got - want| / (|want| + 1) over every array of a result (a tuple or one array)."""
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    if len(got) != len(want):
        raise ValueError(f"{len(got)} results, expected {len(want)}")
    err = 0.0
    for g, r in zip(got, want):
        g, r = np.asarray(g, np.float64).reshape(np.shape(r)), np.asarray(r, np.float64)
        err = max(err, float(np.max(np.abs(g - r) / (np.abs(r) + 1.0))))
    return err
