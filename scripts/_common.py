"""Shared helpers of the StoryLM-0 scripts: weights, an independent NumPy model, PyTorch, compilation.

StoryLM-0 is the one-layer causal decoder of examples/storylm0_forward.kina
(B=1, T=4, H=2 heads of Dh=2, D=4, V=8).  This module is the *trusted side* of
every comparison the validation scripts, the training demo, the benchmark and
the tests make against the compiled Kina programs:

- `load_weights()` reads the one set of deterministic weights
  (examples/storylm0_weights.npz, written by scripts/gen_example_mains.py);
- `forward` / `backward` are a NumPy implementation written by hand, with the
  backward derived on paper (no autodiff, no Kina interpreter), so that a bug
  in the compiler's VJP table cannot hide in the reference;
- `torch_*` run the same algebra under torch.autograd when torch is importable;
- `compile_example` builds an example to a host .so through compiler.build and
  loads it with compiler.runtime.library;
- `Report` prints one line per comparison with its max error and remembers
  failures, so a script ends with `sys.exit(report.exit_code())`.
"""
from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
WEIGHTS_NPZ = EXAMPLES / "storylm0_weights.npz"
if str(ROOT) not in sys.path:   # `python scripts/x.py` from anywhere can import the compiler
    sys.path.insert(0, str(ROOT))

B, T, H, DH, D, V = 1, 4, 2, 2, 4, 8
PROMPT = np.array([[1, 4, 2, 6]], dtype=np.int64)
# Next-token targets of PROMPT: the prompt shifted left by one.  The last
# position has no next prompt token; its target is token 0 ('.'): the prompt
# reads "the cat sat down" and the story's sentences end with '.'.
LAST_TARGET = 0
WEIGHT_NAMES = ("emb", "wq", "wk", "wv", "wo", "lm_head")
TRAINABLE = WEIGHT_NAMES
MASK_NEG = -1.0e4   # additive mask above the diagonal (exp underflows to exactly 0 in F32)
# The vocabulary of the training story (examples/storylm0_story.txt); PROMPT reads "the cat sat down".
VOCAB = (".", "the", "sat", "mat", "cat", "on", "down", "dog")
STORY = EXAMPLES / "storylm0_story.txt"


def load_story() -> np.ndarray:
    """The committed 32-token training story as I64 token ids."""
    words = STORY.read_text().split()
    return np.array([VOCAB.index(w) for w in words], dtype=np.int64)


def decode(ids) -> str:
    return " ".join(VOCAB[int(i)] for i in np.asarray(ids).reshape(-1))


def targets_for(ids: np.ndarray, last: int = LAST_TARGET) -> np.ndarray:
    """[B, T] ids -> [B, T, 1] I64 next-token targets (ids shifted by one, `last` at the end)."""
    nxt = np.concatenate([ids[:, 1:], np.full((ids.shape[0], 1), last, dtype=np.int64)], axis=1)
    return nxt.astype(np.int64)[:, :, None]


def causal_mask() -> np.ndarray:
    """[1, 1, T, T]: 0 on and below the diagonal, MASK_NEG above."""
    upper = np.triu(np.ones((T, T), dtype=bool), k=1)
    return np.where(upper, MASK_NEG, 0.0).astype(np.float32).reshape(1, 1, T, T)


def attention_scale() -> np.ndarray:
    """[1, 1, 1, 1] holding 1/sqrt(Dh), rounded to F32."""
    return np.full((1, 1, 1, 1), 1.0 / np.sqrt(DH), dtype=np.float32)


def load_weights() -> dict[str, np.ndarray]:
    """The committed deterministic weights, as F32 arrays keyed by WEIGHT_NAMES."""
    with np.load(WEIGHTS_NPZ) as z:
        return {k: z[k].astype(np.float32) for k in WEIGHT_NAMES}


def inputs(ids: np.ndarray = PROMPT, weights: dict | None = None) -> dict[str, np.ndarray]:
    """Every forward input by its Kina parameter name (token_ids, emb, mask, scale, wq, ..., lm_head)."""
    w = load_weights() if weights is None else weights
    return {"token_ids": ids.astype(np.int64), "emb": w["emb"], "mask": causal_mask(),
            "scale": attention_scale(), "wq": w["wq"], "wk": w["wk"], "wv": w["wv"],
            "wo": w["wo"], "lm_head": w["lm_head"]}


FORWARD_ARGS = ("token_ids", "emb", "mask", "scale", "wq", "wk", "wv", "wo", "lm_head")
# The floating parameters of the decoder, in reverseMode cotangent order.
FLOAT_ARGS = ("emb", "mask", "scale", "wq", "wk", "wv", "wo", "lm_head")


def ordered(values: dict, names=FORWARD_ARGS) -> list[np.ndarray]:
    return [values[n] for n in names]


# ---- the NumPy model (forward + hand-written backward) -----------------------
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


# ---- PyTorch (optional) --------------------------------------------------------
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


# ---- the Kina side ---------------------------------------------------------------
def compile_example(name: str, out_dir: str | Path | None = None):
    """Build examples/<name>.kina to a .so with compiler.build and load it with compiler.runtime.library."""
    from compiler.build import build_file
    from compiler.runtime.library import load
    out = Path(out_dir or tempfile.mkdtemp(prefix="kina_storylm0_")) / f"lib{name}.so"
    result = build_file(str(EXAMPLES / f"{name}.kina"), out_so=str(out), opt_level=2)
    if not result.ok:
        rendered = [result.source.render(d) if result.source else f"[{d.code}] {d.message}"
                    for d in result.diagnostics]
        raise BuildFailed(f"building examples/{name}.kina failed:\n" + "\n".join(rendered))
    return load(str(result.so_path))


class BuildFailed(RuntimeError):
    """An example did not compile; the message holds the rendered diagnostics."""


def run_example_checks(prefix: str, checks) -> int:
    """Compile each (example, check) pair's example and run check(report, lib, torch);
    a build failure is reported as a failed check.  Returns the process exit code."""
    torch = torch_banner()
    rep = Report()
    out = tempfile.mkdtemp(prefix=prefix)
    for example, check in checks:
        try:
            lib = compile_example(example, out)
        except BuildFailed as e:
            print(e)
            rep.check(f"build {example}.kina", False)
            continue
        check(rep, lib, torch)
    return rep.exit_code()


@dataclass
class Report:
    """Prints each comparison (`name  max|err| = ...  ok/MISMATCH`) and remembers failures."""
    failures: list[str] = field(default_factory=list)
    count: int = 0

    def compare(self, name: str, got, want, atol: float = 1e-4, rtol: float = 1e-4) -> bool:
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        self.count += 1
        if got.shape != want.shape:
            print(f"  {name:<58} shape {got.shape} != {want.shape}  MISMATCH")
            self.failures.append(name)
            return False
        err = float(np.max(np.abs(got - want))) if got.size else 0.0
        ok = bool(np.allclose(got, want, atol=atol, rtol=rtol))
        print(f"  {name:<58} max|err| = {err:.3e}  {'ok' if ok else 'MISMATCH'}")
        if not ok:
            self.failures.append(name)
        return ok

    def check(self, name: str, condition: bool, detail: str = "") -> bool:
        self.count += 1
        print(f"  {name:<58} {detail}  {'ok' if condition else 'FAILED'}")
        if not condition:
            self.failures.append(name)
        return condition

    def exit_code(self) -> int:
        if self.failures:
            print(f"FAILED: {len(self.failures)} of {self.count} comparisons: {', '.join(self.failures)}")
            return 1
        print(f"all {self.count} comparisons passed")
        return 0


def section(title: str) -> None:
    print(f"\n== {title}")


def torch_banner():
    """Import torch or print the skip line the validation scripts promise."""
    torch = torch_or_none()
    if torch is None:
        print("torch: skipped (not installed)")
    else:
        print(f"torch: {torch.__version__}")
    return torch


# ---- training on the story (scripts/train_storylm0.py, tests, benchmark) ---------------------
# Plain SGD learning rate of the demo.  0.5 trains faster at first but is chaotic: after ~1400
# steps one trajectory (compiled or NumPy, they differ only by rounding) can blow up; 0.3 stays
# stable for thousands of steps.
DEMO_LR = 0.3
def corpus_windows(story: np.ndarray | None = None) -> np.ndarray:
    """Every run of T+1 consecutive story tokens, [N, 1, T+1]: inputs w[:, :T], next-token targets w[:, 1:]."""
    s = load_story() if story is None else story
    return np.stack([s[None, i:i + T + 1] for i in range(len(s) - T)])


def window_split(window: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[1, T+1] -> (token_ids [1, T], targets [1, T, 1])."""
    return window[:, :T], window[:, 1:, None]


def train_numpy(steps: int, lr: float, weights: dict | None = None) -> tuple[list[float], dict]:
    """SGD on window k % N at step k, in float32 NumPy; returns (losses, final weights)."""
    w = load_weights() if weights is None else dict(weights)
    windows, losses = corpus_windows(), []
    for k in range(steps):
        ids, targets = window_split(windows[k % len(windows)])
        loss, w = sgd_step(w, targets, ids, lr)
        losses.append(loss)
    return losses, w


def train_torch(torch, steps: int, lr: float, weights: dict | None = None) -> tuple[list[float], dict]:
    """The same training in PyTorch eager (float32, autograd, manual SGD)."""
    w = load_weights() if weights is None else weights
    params = {k: torch.tensor(v, requires_grad=True) for k, v in w.items()}
    consts = {"mask": torch.tensor(causal_mask()), "scale": torch.tensor(attention_scale())}
    windows, losses = torch.tensor(corpus_windows()), []
    for k in range(steps):
        window = windows[k % len(windows)]
        ids, targets = window[:, :T], window[:, 1:, None]
        x = params["emb"][ids]
        heads = lambda a: a.reshape(B, T, H, DH).permute(0, 2, 1, 3)  # noqa: E731
        q, kk, v = (heads(x @ params[n]) for n in ("wq", "wk", "wv"))
        probs = torch.softmax((q @ kk.transpose(-1, -2)) * consts["scale"] + consts["mask"], dim=-1)
        merged = (probs @ v).permute(0, 2, 1, 3).reshape(B, T, D)
        logits = (x + merged @ params["wo"]) @ params["lm_head"]
        loss = -torch.gather(torch.log_softmax(logits, dim=-1), -1, targets).sum() * (1.0 / (B * T))
        grads = torch.autograd.grad(loss, [params[n] for n in TRAINABLE])
        with torch.no_grad():
            for n, g in zip(TRAINABLE, grads):
                params[n] -= lr * g
        losses.append(float(loss.detach()))
    return losses, {k: t.detach().numpy() for k, t in params.items()}


class CompiledTrainer:
    """Runs examples/storylm0_train_step.kina's `train_step` from a compiled library.

    The weights live in two preallocated buffer sets: step k reads set k % 2 and
    writes set (k + 1) % 2 through the runtime's `out=`, so a step allocates
    nothing (the runtime still checks every argument on every call)."""

    def __init__(self, lib, lr: float, weights: dict | None = None):
        self.lib = lib
        w = load_weights() if weights is None else weights
        self.sets = [[np.zeros((1, 1), np.float32)] + [np.array(w[n], np.float32) for n in TRAINABLE]
                     for _ in range(2)]
        self.current = 0
        self.consts = (causal_mask(), attention_scale())
        self.inv_n = np.full((1, 1), 1.0 / (B * T), np.float32)
        self.lr = np.full((1, 1), lr, np.float32)
        self.windows = [np.ascontiguousarray(win) for win in corpus_windows()]

    @property
    def w(self) -> dict[str, np.ndarray]:
        return dict(zip(TRAINABLE, self.sets[self.current][1:]))

    def step(self, k: int) -> float:
        src, dst = self.sets[self.current], self.sets[1 - self.current]
        emb, wq, wk, wv, wo, lm = src[1:]
        self.lib.train_step(self.windows[k % len(self.windows)], emb, *self.consts, wq, wk, wv, wo, lm,
                            self.inv_n, self.lr, out=dst)
        self.current = 1 - self.current
        return float(dst[0][0, 0])

    def train(self, steps: int, on_step=None) -> list[float]:
        losses = []
        for k in range(steps):
            losses.append(self.step(k))
            if on_step:
                on_step(k, losses[-1])
        return losses

    def greedy(self, prompt: np.ndarray, n_new: int) -> np.ndarray:
        """Append n_new argmax tokens, each predicted from the last T tokens by storylm0_fwd."""
        toks = list(prompt.reshape(-1))
        for _ in range(n_new):
            ids = np.array([toks[-T:]], dtype=np.int64)
            logits = self.lib.storylm0_fwd(ids, self.w["emb"], *self.consts, self.w["wq"], self.w["wk"],
                                           self.w["wv"], self.w["wo"], self.w["lm_head"])
            toks.append(int(np.argmax(logits[0, -1])))
        return np.array(toks, dtype=np.int64)
