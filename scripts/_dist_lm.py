"""Shared parts of the distributed StoryLM scripts (train_storylm0_ddp.py, vocab_parallel_storylm0.py,
check_ddp_trajectories.py, benchmarks/bench_distributed.py).

- `Config`: the two model configurations, StoryLM-0 (`make demo`'s model, weights, story and
  schedule) and the scaled StoryLM (examples/storylm.kina at B=4 T=64 D=256 H=8 V=2048);
- `partition`: which of a step's predictions a rank owns, as a loss-weight tensor;
- `library`: a generic source (examples/distributed/*.kina, examples/storylm.kina) built
  once per host with a configuration's sizes;
- `DataParallelTrainer`: one rank's compiled gradient + one all-reduce + compiled SGD;
- `single_process_losses`: the reference, single-process training on the whole batch
  (StoryLM-0: examples/storylm.kina's train_step exactly as `make demo` runs it; scaled: the
  same train_step at the scaled sizes).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from report import compile_example
from storylm_data import EXAMPLES, MASK_NEG, STORYLM, WEIGHT_NAMES, D, H, T, V, load_story, load_weights
from storylm_train import DEMO_LR, CompiledTrainer

from compiler.distributed import world as distributed

DISTRIBUTED = EXAMPLES / "distributed"
WEIGHTS = WEIGHT_NAMES          # emb, wq, wk, wv, wo, lm_head


@dataclass(frozen=True)
class Config:
    """A model, its data and its schedule.  A step trains on `batch` windows of T+1 tokens:
    windows (k*batch + j) % n_windows of the corpus's sliding windows, j < batch."""
    name: str
    batch: int
    T: int
    D: int
    H: int
    V: int
    lr: float
    steps: int
    seed: int = 0
    corpus_len: int = 0   # scaled: length of the synthetic corpus

    @property
    def DH(self) -> int:
        return self.D // self.H

    def sizes(self, b: int, vl: int | None = None) -> dict[str, int]:
        """The `--size` values for b windows per call (and a vocabulary shard of vl)."""
        return {"B": b, "T": self.T, "H": self.H, "DH": self.DH, "V": self.V, **({"VL": vl} if vl else {})}

    def describe(self) -> str:
        return (f"{self.name}: {self.batch} window(s) of T={self.T} per step, D={self.D}, H={self.H}, "
                f"V={self.V}, lr={self.lr}")

    def meta(self) -> dict:
        """What a checkpoint records to refuse resuming a different run."""
        return {"config": self.name, "batch": self.batch, "T": self.T, "D": self.D, "H": self.H,
                "V": self.V, "lr": self.lr, "seed": self.seed, "corpus_len": self.corpus_len}


STORYLM0 = Config("storylm0", batch=1, T=T, D=D, H=H, V=V, lr=DEMO_LR, steps=420)
SCALED = Config("scaled", batch=4, T=64, D=256, H=8, V=2048, lr=0.1, steps=100, corpus_len=4096)


def config(name: str, **overrides) -> Config:
    base = {"storylm0": STORYLM0, "scaled": SCALED}[name]
    cfg = replace(base, **{k: v for k, v in overrides.items() if v is not None})
    if cfg.D % cfg.H:
        raise distributed.ShardingError(f"D={cfg.D} must be a multiple of H={cfg.H}")
    return cfg


# ---- data and weights ------------------------------------------------------------------------
def corpus(cfg: Config) -> np.ndarray:
    if cfg.name == "storylm0":
        return load_story()
    return np.random.default_rng(cfg.seed + 1).integers(0, cfg.V, cfg.corpus_len).astype(np.int64)


def windows(cfg: Config) -> np.ndarray:
    """Every run of T+1 consecutive corpus tokens: [n, T+1]."""
    s = corpus(cfg)
    return np.stack([s[i:i + cfg.T + 1] for i in range(len(s) - cfg.T)])


def step_windows(cfg: Config, wins: np.ndarray, k: int) -> np.ndarray:
    """The [batch, T+1] windows of step k."""
    return wins[[(k * cfg.batch + j) % len(wins) for j in range(cfg.batch)]]


def initial_weights(cfg: Config) -> dict[str, np.ndarray]:
    if cfg.name == "storylm0":
        return load_weights()
    rng, D, V = np.random.default_rng(cfg.seed), cfg.D, cfg.V    # benchmarks/bench_scaled.py's draw
    w = {"emb": rng.normal(0, 0.5, (V, D)), "lm_head": rng.normal(0, D ** -0.5, (D, V))}
    for n in ("wq", "wk", "wv", "wo"):
        w[n] = rng.normal(0, D ** -0.5, (D, D))
    return {n: np.ascontiguousarray(w[n], np.float32) for n in WEIGHTS}


def constants(cfg: Config) -> tuple[np.ndarray, np.ndarray]:
    """(causal additive mask [1,1,T,T], attention scale [1,1,1,1])."""
    mask = np.triu(np.full((cfg.T, cfg.T), MASK_NEG, np.float32), 1).reshape(1, 1, cfg.T, cfg.T)
    return mask, np.full((1, 1, 1, 1), 1.0 / np.sqrt(cfg.DH), np.float32)


# ---- who owns which predictions -------------------------------------------------------------
@dataclass(frozen=True)
class Share:
    """A rank's part of every step: windows rows[0]..rows[1]-1 of the step's batch, and the loss
    weight of each of their predictions (1/(batch*T) where this rank owns it, else 0)."""
    rows: tuple[int, int]
    weight: np.ndarray     # [rows, T, 1] F32


def partition(cfg: Config, world_size: int, rank: int) -> Share:
    """Split the batch*T next-token predictions of a step into world_size equal contiguous parts.

    With batch >= world_size the parts are whole windows (batch rows); StoryLM-0's step has
    one window, so its T predictions are split instead and every rank runs the forward of
    the whole window (the causal prefix its predictions need) with weight 0 on the others'."""
    preds = cfg.batch * cfg.T
    start, stop = distributed.shard_range(preds, world_size, rank,
                                          f"{cfg.batch} x {cfg.T} next-token predictions of a step")
    chunk = stop - start
    if chunk % cfg.T and cfg.T % chunk:
        raise distributed.ShardingError(
            f"{world_size} processes would split a step's {cfg.batch} windows of {cfg.T} predictions "
            f"into parts of {chunk}, which neither cover whole windows nor divide one")
    r0, r1 = start // cfg.T, -(-stop // cfg.T)
    weight = np.zeros((r1 - r0, cfg.T, 1), np.float32)
    flat = weight.reshape(-1)
    flat[start - r0 * cfg.T:stop - r0 * cfg.T] = 1.0 / preds
    return Share((r0, r1), weight)


# ---- Kina programs ---------------------------------------------------------------------------
def library(program: str, cfg: Config, b: int, name: str, opt_level: int, launch=None, cache_dir=None,
            vl: int | None = None, exports=None):
    """examples/distributed/<program>.kina (or "storylm": examples/storylm.kina) built once per
    host with --size for b windows per call (and shards of vl columns)."""
    path = STORYLM if program == "storylm" else DISTRIBUTED / f"{program}.kina"
    return distributed.build_shared(path.read_text(), name, opt_level, launch, cache_dir,
                                    sizes=cfg.sizes(b, vl), exports=exports)


def dp_library(cfg: Config, rows: int, opt_level: int, launch=None, cache_dir=None):
    """The data-parallel program (grad, sgd, forward) for `rows` windows per rank, built once per host."""
    return library("lm_data_parallel", cfg, rows, f"{cfg.name}_dp_b{rows}", opt_level, launch, cache_dir)


# What a rank of the vocabulary-parallel program calls (the file's one-process 2-way tp_vocab
# holds the whole lm_head, so a rank's library leaves it out).
VP_EXPORTS = ("shard_logits", "vp_forward", "vp_sumexp", "vp_loss", "vp_shard_grad", "vp_body_grad", "vp_sgd")


def vp_library(cfg: Config, vl: int, opt_level: int, launch=None, cache_dir=None):
    """The vocabulary-parallel program for shards of vl columns (one window per step)."""
    return library("lm_vocab_parallel", cfg, 1, f"{cfg.name}_vp{vl}", opt_level, launch, cache_dir, vl=vl,
                   exports=VP_EXPORTS)


def single_library(cfg: Config, opt_level: int = 2):
    """examples/storylm.kina's train_step for the whole batch of a step (one process)."""
    return library("storylm", cfg, cfg.batch, f"{cfg.name}_single", opt_level, exports=("train_step",))


def aligned_views(shapes: list[tuple[int, ...]], align: int = 16) -> tuple[np.ndarray, list[np.ndarray]]:
    """One flat F32 buffer and C-contiguous views into it, each starting on a 64-byte boundary,
    so a compiled function writes its results straight into the buffer one collective reduces."""
    offsets, n = [], 0
    for s in shapes:
        offsets.append(n)
        n += -(-int(np.prod(s)) // align) * align
    flat = np.zeros(n + align, np.float32)
    skip = (-flat.ctypes.data // 4) % align            # first 64-byte-aligned element
    flat = flat[skip:skip + n]
    return flat, [flat[o:o + int(np.prod(s))].reshape(s) for o, s in zip(offsets, shapes)]


class DataParallelTrainer:
    """One rank of data-parallel SGD: compiled `grad` on its share, one all-reduce, compiled `sgd`.

    The loss part and the gradients land in one aligned flat buffer (out= views), which a
    single all-reduce sums in place; the weights ping-pong between two buffer sets."""

    def __init__(self, lib, cfg: Config, world, share: Share, weights: dict[str, np.ndarray]):
        self.lib, self.cfg, self.world, self.share = lib, cfg, world, share
        shapes = [(1, 1)] + [weights[n].shape for n in WEIGHTS]
        self.flat, self.outs = aligned_views(shapes)
        self.sets = [[np.array(weights[n], np.float32) for n in WEIGHTS] for _ in range(2)]
        self.current = 0
        self.mask, self.scale = constants(cfg)
        self.lr = np.full((1, 1), cfg.lr, np.float32)
        self.windows = windows(cfg)

    @property
    def weights(self) -> dict[str, np.ndarray]:
        return dict(zip(WEIGHTS, self.sets[self.current]))

    def load(self, weights: dict[str, np.ndarray]) -> None:
        for dst, n in zip(self.sets[self.current], WEIGHTS):
            dst[...] = weights[n]

    def local_windows(self, k: int) -> np.ndarray:
        r0, r1 = self.share.rows
        return np.ascontiguousarray(step_windows(self.cfg, self.windows, k)[r0:r1])

    def step(self, k: int) -> float:
        src, dst = self.sets[self.current], self.sets[1 - self.current]
        emb, wq, wk, wv, wo, lm = src
        self.lib.grad(self.local_windows(k), emb, self.mask, self.scale, wq, wk, wv, wo, lm,
                      self.share.weight, out=self.outs)
        self.world.all_reduce(self.flat, what=f"gradient all-reduce of step {k + 1}")
        self.lib.sgd(*src, *self.outs[1:], self.lr, out=dst)
        self.current = 1 - self.current
        return float(self.outs[0][0, 0])


# ---- the single-process reference --------------------------------------------------------------
def single_process_losses(cfg: Config, steps: int, opt_level: int = 2) -> list[float]:
    """Single-process SGD on the whole batch of every step (no torch.distributed)."""
    if cfg.name == "storylm0" and cfg.batch == 1:      # exactly `make demo`'s trainer
        return CompiledTrainer(compile_example("storylm"), cfg.lr).train(steps)
    lib = single_library(cfg, opt_level)
    w = initial_weights(cfg)
    sets = [[np.array(w[n]) for n in WEIGHTS] for _ in range(2)]
    loss = np.zeros((1, 1), np.float32)
    mask, scale = constants(cfg)
    lr = np.full((1, 1), cfg.lr, np.float32)
    wins, losses = windows(cfg), []
    for k in range(steps):
        src, dst = sets[k % 2], sets[1 - k % 2]
        emb, wq, wk, wv, wo, lm = src
        lib.train_step(step_windows(cfg, wins, k), emb, mask, scale, wq, wk, wv, wo, lm, lr,
                       out=[loss, *dst])
        losses.append(float(loss[0, 0]))
    return losses

