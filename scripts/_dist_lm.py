"""Shared parts of the distributed StoryLM scripts (train_storylm0_ddp.py, vocab_parallel_storylm0.py,
check_ddp_trajectories.py, benchmarks/bench_distributed.py).

- `Config`: the two model configurations, StoryLM-0 (`make demo`'s model, weights, story and
  schedule) and the scaled StoryLM (examples/storylm.kina at B=4 T=64 D=256 H=8 V=2048);
- the schedule: a step's windows (`step_windows`), cycling through the corpus, or in epochs
  whose last batch is shorter when the batch does not divide the corpus (`epoch_batches`);
- `partition`: which of a step's predictions a rank owns, as a loss-weight tensor (B or B+1
  whole windows per rank, or positions of a window when there are fewer windows than ranks);
- `library`: a generic source (examples/distributed/*.kina, examples/storylm.kina) built
  once per host with a configuration's sizes; the data-parallel program leaves B dynamic,
  so every rank and every step (whatever its row count) calls the same .so;
- `DataParallelTrainer`: one rank's compiled gradient + one all-reduce + compiled SGD;
- `single_process_losses`: the reference, single-process training on the whole batch
  through examples/storylm.kina's train_step built with no --size (one dynamic library for
  both configurations; StoryLM-0 exactly as `make demo` runs it).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from storylm_data import EXAMPLES, MASK_NEG, STORYLM, WEIGHT_NAMES, D, H, T, V, load_story, load_weights
from storylm_train import DEMO_LR, CompiledTrainer

from compiler.distributed import world as distributed

DISTRIBUTED = EXAMPLES / "distributed"
WEIGHTS = WEIGHT_NAMES          # emb, wq, wk, wv, wo, lm_head


@dataclass(frozen=True)
class Config:
    """A model, its data and its schedule.  A step trains on `batch` windows of T+1 tokens:
    windows (k*batch + j) % n_windows of the corpus's sliding windows, j < batch; with
    `epoch_batches`, epochs of ceil(n_windows / batch) steps over windows in order, the last
    step of an epoch taking the n_windows % batch windows left (when not 0)."""
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
    epoch_batches: bool = False

    @property
    def DH(self) -> int:
        return self.D // self.H

    def sizes(self, b: int | None, vl: int | None = None) -> dict[str, int]:
        """The `--size` values for b windows per call (None: B stays dynamic), and a
        vocabulary shard of vl."""
        return {**({"B": b} if b is not None else {}), "T": self.T, "H": self.H, "DH": self.DH, "V": self.V,
                **({"VL": vl} if vl else {})}

    def describe(self) -> str:
        return (f"{self.name}: {self.batch} window(s) of T={self.T} per step"
                f"{' (epochs: a shorter last batch)' if self.epoch_batches else ''}, D={self.D}, H={self.H}, "
                f"V={self.V}, lr={self.lr}")

    def meta(self) -> dict:
        """What a checkpoint records to refuse resuming a different run."""
        return {"config": self.name, "batch": self.batch, "T": self.T, "D": self.D, "H": self.H,
                "V": self.V, "lr": self.lr, "seed": self.seed, "corpus_len": self.corpus_len,
                "epoch_batches": self.epoch_batches}


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


def steps_per_epoch(cfg: Config, n_windows: int) -> int:
    """With epoch_batches: the steps of one pass over the corpus (the last one maybe shorter)."""
    return -(-n_windows // cfg.batch)


def step_windows(cfg: Config, wins: np.ndarray, k: int) -> np.ndarray:
    """The [b, T+1] windows of step k: b = batch, or fewer for the last step of an epoch."""
    if cfg.epoch_batches:
        i = k % steps_per_epoch(cfg, len(wins))
        return wins[i * cfg.batch:(i + 1) * cfg.batch]
    return wins[[(k * cfg.batch + j) % len(wins) for j in range(cfg.batch)]]


def batch_sizes(cfg: Config, n_windows: int) -> list[int]:
    """Every number of windows a step of this schedule trains on (full batch first)."""
    if not cfg.epoch_batches:
        return [cfg.batch]
    full, last = min(cfg.batch, n_windows), n_windows % cfg.batch
    return [full] + ([last] if last and last != full else [])


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
    """A rank's part of a step: windows rows[0]..rows[1]-1 of the step's batch, and the loss
    weight of each of their predictions (1/(batch*T) where this rank owns it, else 0)."""
    rows: tuple[int, int]
    weight: np.ndarray     # [rows, T, 1] F32


def split(n: int, parts: int, i: int) -> tuple[int, int]:
    """[start, stop) of part i of n items cut into `parts` contiguous parts of floor(n/parts)
    or ceil(n/parts) items (the first n % parts parts are the longer ones)."""
    base, extra = divmod(n, parts)
    start = i * base + min(i, extra)
    return start, start + base + (i < extra)


def partition(cfg: Config, world_size: int, rank: int, batch: int | None = None) -> Share:
    """Split the batch*T next-token predictions of a step (batch: cfg.batch by default; the
    last step of an epoch may have fewer windows) over world_size ranks.

    With batch >= world_size a rank owns B or B+1 whole windows (B = batch // world_size).
    With fewer windows than ranks (StoryLM-0's step has one) the predictions themselves are
    split into floor/ceil contiguous parts, and a rank runs the forward of every window its
    part touches (the causal prefix its predictions need) with weight 0 on the others'.
    Every owned prediction weighs 1/(batch*T), so the all-reduced sum of the ranks' gradients
    is the gradient of the step's mean NLL whatever the row counts; the data-parallel
    library takes any B, so unequal shares need no other build."""
    batch = cfg.batch if batch is None else batch
    preds = batch * cfg.T
    if not 1 <= world_size <= preds:
        raise distributed.ShardingError(
            f"cannot split the {batch} x {cfg.T} next-token predictions of a step ({preds}) over "
            f"{world_size} processes: every process needs at least one prediction (at most {preds} processes)")
    if batch >= world_size:
        r0, r1 = split(batch, world_size, rank)
        start, stop = r0 * cfg.T, r1 * cfg.T
    else:
        start, stop = split(preds, world_size, rank)
        r0, r1 = start // cfg.T, -(-stop // cfg.T)
    weight = np.zeros((r1 - r0, cfg.T, 1), np.float32)
    weight.reshape(-1)[start - r0 * cfg.T:stop - r0 * cfg.T] = 1.0 / preds
    return Share((r0, r1), weight)


def check_partitions(cfg: Config, world_size: int, n_windows: int) -> None:
    """Raise ShardingError now if some step of the schedule cannot be split over world_size."""
    for b in batch_sizes(cfg, n_windows):
        partition(cfg, world_size, 0, b)


# ---- Kina programs ---------------------------------------------------------------------------
def library(program: str, cfg: Config, b: int | None, name: str, opt_level: int, launch=None, cache_dir=None,
            vl: int | None = None, exports=None):
    """examples/distributed/<program>.kina (or "storylm": examples/storylm.kina) built once per
    host with --size for b windows per call (None: B dynamic) and shards of vl columns."""
    path = STORYLM if program == "storylm" else DISTRIBUTED / f"{program}.kina"
    return distributed.build_shared(path.read_text(), name, opt_level, launch, cache_dir,
                                    sizes=cfg.sizes(b, vl), exports=exports)


def dp_library(cfg: Config, opt_level: int, launch=None, cache_dir=None):
    """The data-parallel program (grad, sgd, forward) built once per host with --size for T, H,
    DH and V only: B stays dynamic, so one .so serves every rank's share and every step's."""
    return library("lm_data_parallel", cfg, None, f"{cfg.name}_dp", opt_level, launch, cache_dir)


# What a rank of the vocabulary-parallel program calls (the file's one-process 2-way tp_vocab
# holds the whole lm_head, so a rank's library leaves it out).
VP_EXPORTS = ("shard_logits", "vp_forward", "vp_sumexp", "vp_loss", "vp_shard_grad", "vp_body_grad", "vp_sgd")


def vp_library(cfg: Config, vl: int, opt_level: int, launch=None, cache_dir=None):
    """The vocabulary-parallel program for shards of vl columns (one window per step)."""
    return library("lm_vocab_parallel", cfg, 1, f"{cfg.name}_vp{vl}", opt_level, launch, cache_dir, vl=vl,
                   exports=VP_EXPORTS)


def single_library(opt_level: int = 2, cache_dir=None):
    """examples/storylm.kina's train_step built with no --size: one dynamic library for every
    configuration and batch (B, T, DH, V bound from the arrays, H passed as a keyword)."""
    return distributed.build_shared(STORYLM.read_text(), "storylm_dynamic", opt_level, None, cache_dir,
                                    exports=("train_step",))


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
    single all-reduce sums in place; the weights ping-pong between two buffer sets.  The
    share of a step depends only on its number of windows (a shorter last batch of an epoch
    is split again); the library binds B from the windows at each call."""

    def __init__(self, lib, cfg: Config, world, weights: dict[str, np.ndarray]):
        self.lib, self.cfg, self.world = lib, cfg, world
        shapes = [(1, 1)] + [weights[n].shape for n in WEIGHTS]
        self.flat, self.outs = aligned_views(shapes)
        self.sets = [[np.array(weights[n], np.float32) for n in WEIGHTS] for _ in range(2)]
        self.current = 0
        self.mask, self.scale = constants(cfg)
        self.lr = np.full((1, 1), cfg.lr, np.float32)
        self.windows = windows(cfg)
        self.shares: dict[int, Share] = {}
        self.rows_called: set[int] = set()      # the B values this rank's `grad` was called at

    @property
    def weights(self) -> dict[str, np.ndarray]:
        return dict(zip(WEIGHTS, self.sets[self.current]))

    def load(self, weights: dict[str, np.ndarray]) -> None:
        for dst, n in zip(self.sets[self.current], WEIGHTS):
            dst[...] = weights[n]

    def share(self, batch: int) -> Share:
        if batch not in self.shares:
            self.shares[batch] = partition(self.cfg, self.world.size, self.world.rank, batch)
        return self.shares[batch]

    def local(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(this rank's windows of step k, their loss weights)."""
        wins = step_windows(self.cfg, self.windows, k)
        share = self.share(len(wins))
        r0, r1 = share.rows
        return np.ascontiguousarray(wins[r0:r1]), share.weight

    def step(self, k: int) -> float:
        src, dst = self.sets[self.current], self.sets[1 - self.current]
        emb, wq, wk, wv, wo, lm = src
        wins, weight = self.local(k)
        self.rows_called.add(len(wins))
        self.lib.grad(wins, emb, self.mask, self.scale, wq, wk, wv, wo, lm, weight, out=self.outs)
        self.world.all_reduce(self.flat, what=f"gradient all-reduce of step {k + 1}")
        self.lib.sgd(*src, *self.outs[1:], self.lr, out=dst)
        self.current = 1 - self.current
        return float(self.outs[0][0, 0])


# ---- the single-process reference --------------------------------------------------------------
def single_process_losses(cfg: Config, steps: int, opt_level: int = 2, cache_dir=None) -> list[float]:
    """Single-process SGD on the whole batch of every step (no torch.distributed), through
    the dynamic storylm library (the same .so for StoryLM-0, the scaled sizes and a shorter
    last batch)."""
    lib = single_library(opt_level, cache_dir)
    if cfg.name == "storylm0" and cfg.batch == 1:      # exactly `make demo`'s trainer and library
        return CompiledTrainer(lib, cfg.lr).train(steps)
    w = initial_weights(cfg)
    sets = [[np.array(w[n]) for n in WEIGHTS] for _ in range(2)]
    loss = np.zeros((1, 1), np.float32)
    mask, scale = constants(cfg)
    lr = np.full((1, 1), cfg.lr, np.float32)
    wins, losses = windows(cfg), []
    for k in range(steps):
        src, dst = sets[k % 2], sets[1 - k % 2]
        emb, wq, wk, wv, wo, lm = src
        lib.train_step(np.ascontiguousarray(step_windows(cfg, wins, k)), emb, mask, scale, wq, wk, wv, wo, lm,
                       lr, out=[loss, *dst], H=cfg.H)
        losses.append(float(loss[0, 0]))
    return losses
