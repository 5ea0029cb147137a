"""Training StoryLM-0 on the story: plain SGD in NumPy, in PyTorch, and through the compiled step.

- `DEMO_LR`, the demo's learning rate;
- `train_numpy` / `train_torch`: SGD on window k % N at step k (storylm_data's
  `corpus_windows`), in float32 NumPy (storylm_numpy's `sgd_step`) or PyTorch eager;
- `CompiledTrainer` runs `train_step` of examples/storylm.kina (StoryLM-0's sizes) from a
  compiled library with preallocated weight buffers, decodes greedily, and samples
  (`sample_next`: temperature, top-k, top-p); `kina_init` draws starting weights with the
  library's `init`.

Builds on storylm_data and storylm_numpy.  Used by train_storylm0.py, _dist_lm.py,
validate_greedy.py, benchmarks/bench_train.py, tests/test_training.py and
tests/test_distributed_algebra.py.
"""
from __future__ import annotations

import numpy as np
from storylm_data import (
    DH,
    TRAINABLE,
    B,
    D,
    H,
    T,
    V,
    attention_scale,
    causal_mask,
    corpus_windows,
    load_weights,
    window_split,
)
from storylm_numpy import sgd_step

# Plain SGD learning rate of the demo.  0.5 trains faster at first but is chaotic: after ~1400
# steps one trajectory (compiled or NumPy, they differ only by rounding) can blow up; 0.3 stays
# stable for thousands of steps.
DEMO_LR = 0.3


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


def kina_init(lib, key=(0, 26)) -> dict[str, np.ndarray]:
    """StoryLM-0's starting weights drawn in Kina: `init` of examples/storylm.kina (normals
    scaled by 1/sqrt(D), one split key per weight), the same bits at every opt level."""
    sizes = {"H": H, "DH": DH, "V": V} if getattr(lib.init, "sizes", ()) else {}
    return dict(zip(TRAINABLE, lib.init(np.array(key, np.int64), **sizes)))


class CompiledTrainer:
    """Runs `train_step` of examples/storylm.kina from a compiled library: built at
    StoryLM-0's sizes, or dynamic (built without --size: one library for every size,
    which binds B, T, DH and V from the arrays and takes H, which only H * DH shows, as a
    keyword).

    The weights live in two preallocated buffer sets: step k reads set k % 2 and
    writes set (k + 1) % 2 through the runtime's `out=`, so a step allocates
    nothing (the runtime still checks every argument on every call)."""

    def __init__(self, lib, lr: float, weights: dict | None = None):
        self.lib = lib
        self.sizes = {"H": H} if getattr(lib.train_step, "sizes", ()) else {}
        w = load_weights() if weights is None else weights
        self.sets = [[np.zeros((1, 1), np.float32)] + [np.array(w[n], np.float32) for n in TRAINABLE]
                     for _ in range(2)]
        self.current = 0
        self.consts = (causal_mask(), attention_scale())
        self.lr = np.full((1, 1), lr, np.float32)
        self.windows = [np.ascontiguousarray(win) for win in corpus_windows()]

    @property
    def w(self) -> dict[str, np.ndarray]:
        return dict(zip(TRAINABLE, self.sets[self.current][1:]))

    def step(self, k: int) -> float:
        src, dst = self.sets[self.current], self.sets[1 - self.current]
        emb, wq, wk, wv, wo, lm = src[1:]
        self.lib.train_step(self.windows[k % len(self.windows)], emb, *self.consts, wq, wk, wv, wo, lm,
                            self.lr, out=dst, **self.sizes)
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
        """Append n_new argmax tokens, each predicted from the last T tokens by `forward`."""
        toks = list(prompt.reshape(-1))
        for _ in range(n_new):
            ids = np.array([toks[-T:]], dtype=np.int64)
            logits = self.lib.forward(ids, self.w["emb"], *self.consts, self.w["wq"], self.w["wk"],
                                           self.w["wv"], self.w["wo"], self.w["lm_head"], **self.sizes)
            toks.append(int(np.argmax(logits[0, -1])))
        return np.array(toks, dtype=np.int64)

    def sample(self, prompt: np.ndarray, n_new: int, key, temperature: float = 1.0, top_k: int = 4,
               top_p: float = 0.9) -> np.ndarray:
        """Append n_new tokens drawn by `sample_next` (temperature, top-k, top-p): one library
        call per token, step k drawing with random_fold_in(key, k) inside the library."""
        toks = list(prompt.reshape(-1))
        knobs = (np.full((1, 1), 1.0 / temperature, np.float32), np.full((1, 1), top_k, np.int64),
                 np.full((1, 1), top_p, np.float32))
        w, key = self.w, np.asarray(key, np.int64)
        for k in range(n_new):
            ids = np.array([toks[-T:]], dtype=np.int64)
            nxt = self.lib.sample_next(ids, w["emb"], *self.consts, w["wq"], w["wk"], w["wv"], w["wo"], w["lm_head"],
                                       key, np.array(k, np.int64), *knobs, **self.sizes)
            toks.append(int(nxt[0, 0]))
        return np.array(toks, dtype=np.int64)

    def greedy_growing(self, prompt: np.ndarray, n_new: int) -> np.ndarray:
        """Append n_new tokens, each `next_token` of the WHOLE sequence so far (T = 4, 5,
        ...): one dynamic library call per token at a new T each time."""
        toks = prompt.reshape(1, -1).astype(np.int64)
        for _ in range(n_new):
            t = toks.shape[1]
            nxt = self.lib.next_token(toks, self.w["emb"], causal_mask(t), self.consts[1], self.w["wq"],
                                      self.w["wk"], self.w["wv"], self.w["wo"], self.w["lm_head"], **self.sizes)
            toks = np.concatenate([toks, nxt], axis=1)
        return toks[0]
