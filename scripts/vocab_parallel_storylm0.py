"""StoryLM-0 with its vocabulary sharded over N processes: tensor-parallel logits and the
vocab-parallel (Megatron-LM) cross-entropy training step, checked against one process.

    torchrun --nproc-per-node 2 scripts/vocab_parallel_storylm0.py [--only logits|step] [--steps 28]

Rank r of N holds only lm_head[:, r*V/N:(r+1)*V/N] (N must divide V = 8) and runs the
compiled functions of examples/distributed/lm_vocab_parallel.kina (built once per host
by compiler.distributed.world.build_shared); the cross-rank reductions are torch.distributed
collectives.  Rank 0 prints one line per check (max error, ok/MISMATCH) and every rank
exits 1 on any mismatch:

logits (the column-parallel algebra of that file's 2-way tp_vocab across processes,
prompt [1, 4, 2, 6]):
  (a) the all-gather of the ranks' [1, 4, V/N] blocks equals the unsharded logits (NumPy,
      and the compiled single-process `forward` of examples/storylm.kina);
  (b) rank r's block is columns r*V/N.. of the unsharded logits;
  (c) changing the last token (6 -> 3) leaves rows 0..2 of the gathered logits bit-identical.
step (--steps SGD steps over the story windows, lr 0.3):
  the mean NLL from the sharded logits (all-reduces of the row max, then of the sum of
  exponentials and the target logit) and the gradients (g_lm_head shard local, g_residual
  all-reduced, the replicated body's gradients from it) equal the single-process
  examples/storylm.kina's train_step step by step, and NumPy's gradients at step 0; no
  per-rank function takes or returns a [B*T, V] tensor; the replicated weights stay
  identical on every rank.
"""
from __future__ import annotations

import argparse
import sys

import _dist_lm as L
import numpy as np
from report import Report, compile_example, section
from storylm_data import PROMPT, WEIGHT_NAMES, attention_scale, causal_mask, inputs, load_weights, ordered, window_split
from storylm_numpy import forward, nll_grads

from compiler.distributed import world as distributed
from compiler.distributed.world import DistributedError

BODY = ("emb", "wq", "wk", "wv", "wo")
CHANGED_LAST = np.array([[1, 4, 2, 3]], dtype=np.int64)


class VocabParallelStep:
    """One rank's state and step of vocab-parallel SGD (3 collectives per step)."""

    def __init__(self, lib, world, cfg: L.Config, lo: int, hi: int, weights: dict, lm_shard: np.ndarray):
        self.lib, self.world, self.lo, self.hi = lib, world, lo, hi
        bt, vl, d = cfg.T, hi - lo, cfg.D
        self.body = [np.array(weights[n]) for n in BODY]
        self.lm = np.array(lm_shard)
        self.mask, self.scale = L.constants(cfg)
        self.res, self.z = np.empty((bt, d), np.float32), np.empty((bt, vl), np.float32)
        self.m = np.empty((bt, 1), np.float32)
        self.s_picked = np.empty((2, bt, 1), np.float32)   # one all-reduce for both
        self.g_res, self.g_lm = np.empty((bt, d), np.float32), np.empty((d, vl), np.float32)
        self.inv_n = np.full((1, 1), 1.0 / bt, np.float32)

    def local_targets(self, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the target's column in this shard, clamped; 1.0 where this shard owns the target)."""
        t = targets.reshape(-1, 1)
        own = ((t >= self.lo) & (t < self.hi)).astype(np.float32)
        return np.clip(t - self.lo, 0, self.hi - self.lo - 1), own

    def grads(self, ids: np.ndarray, targets: np.ndarray) -> tuple[float, list[np.ndarray]]:
        """(mean NLL, [g_emb, g_wq, g_wk, g_wv, g_wo, g_lm_shard])."""
        lib, w = self.lib, self.world
        t_local, own = self.local_targets(targets)
        lib.vp_forward(ids, self.body[0], self.mask, self.scale, *self.body[1:], self.lm,
                       out=(self.res, self.z, self.m))
        w.all_reduce(self.m, "max", what="all-reduce of the row max")
        s, picked = self.s_picked
        lib.vp_sumexp(self.z, self.m, t_local, own, out=(s, picked))
        w.all_reduce(self.s_picked, what="all-reduce of the sum of exponentials and target logit")
        loss = float(lib.vp_loss(s, picked, self.inv_n)[0, 0])
        lib.vp_shard_grad(self.res, self.lm, self.m, s, t_local, own, self.inv_n, out=(self.g_res, self.g_lm))
        w.all_reduce(self.g_res, what="all-reduce of g_residual")
        g_body = lib.vp_body_grad(ids, self.body[0], self.mask, self.scale, *self.body[1:], self.g_res)
        return loss, [*g_body, self.g_lm]

    def step(self, ids, targets, lr: np.ndarray) -> tuple[float, list[np.ndarray]]:
        loss, g = self.grads(ids, targets)
        new = self.lib.vp_sgd(*self.body, self.lm, *g, lr)
        self.body, self.lm = list(new[:5]), new[5]
        return loss, g


def gather_vocab(world, block: np.ndarray) -> np.ndarray:
    """All-gather of [..., V/N] blocks into [..., V] (the gathered [N, ..., V/N] moved into place)."""
    g = world.all_gather(block, what="all-gather of the vocabulary shards")
    return np.moveaxis(g, 0, -2).reshape(block.shape[:-1] + (-1,))


def check_logits(rep, world, lib, weights, lm_shard, lo, hi):
    mask, scale = causal_mask(), attention_scale()
    body = [weights[n] for n in BODY]

    def sharded(ids):
        block = lib.shard_logits(ids, body[0], mask, scale, *body[1:], lm_shard)
        return block, gather_vocab(world, block)

    block, logits = sharded(PROMPT)
    blocks = world.all_gather(block, what="all-gather of the blocks for check (b)")
    _, logits2 = sharded(CHANGED_LAST)
    if world.rank:
        return
    section(f"tensor-parallel logits on {world.size} processes (vocabulary shards of {hi - lo})")
    ref, _ = forward(inputs())
    fwd = compile_example("storylm")
    rep.compare("(a) all-gathered logits vs NumPy residual @ lm_head", logits, ref)
    rep.compare("(a) all-gathered logits vs compiled forward", logits,
                fwd.forward(*ordered(inputs())), atol=1e-6)
    width = hi - lo
    for r in range(world.size):
        rep.compare(f"(b) rank {r}'s block vs columns {r * width}..{(r + 1) * width - 1}", blocks[r],
                    ref[..., r * width:(r + 1) * width])
    rep.compare("(c) last token 6 -> 3: rows 0..2 unchanged (bit for bit)", logits2[:, :3], logits[:, :3],
                atol=0, rtol=0)
    moved = float(np.max(np.abs(logits2[:, 3] - logits[:, 3])))
    rep.check("(c) ... and row 3 changed", moved > 1e-3, f"max|delta| = {moved:.3e}")


def full_shapes(lib, cfg) -> list[str]:
    """The per-rank functions' tensors shaped like the full logits ([B*T, V] or [B, T, V])."""
    bad = {(cfg.T, cfg.V), (1, cfg.T, cfg.V)}
    return [f"{f.name}: {s.name}" for f in lib.functions.values() for s in f.params + f.results
            if s.shape in bad]


def check_step(rep, world, lib, cfg, weights, lm_shard, lo, hi, steps: int):
    vp = VocabParallelStep(lib, world, cfg, lo, hi, weights, lm_shard)
    lr = np.full((1, 1), cfg.lr, np.float32)
    wins = L.windows(cfg)
    losses, first_grads = [], None
    for k in range(steps):
        ids, targets = window_split(L.step_windows(cfg, wins, k))
        loss, g = vp.step(np.ascontiguousarray(ids), np.ascontiguousarray(targets), lr)
        losses.append(loss)
        if k == 0:
            first_grads = [*g[:5], gather_vocab(world, g[5][None])[0]]
    lm = gather_vocab(world, vp.lm[None])[0]
    spread = [float(np.max(np.ptp(world.all_gather(b, what="all-gather of the replicated weights"), axis=0)))
              for b in vp.body]
    if world.rank:
        return
    section(f"vocab-parallel mean-NLL step on {world.size} processes, {steps} step(s), lr {cfg.lr}")
    rep.check("no per-rank function holds [B*T, V] logits", world.size == 1 or not full_shapes(lib, cfg),
              ", ".join(full_shapes(lib, cfg)) or "none")
    ids, targets = window_split(L.step_windows(cfg, wins, 0))
    p = inputs(ids, weights)
    p["inv_n"] = vp.inv_n
    ref_loss, ref_g = nll_grads(p, targets)
    rep.compare("step 0: mean NLL vs NumPy", losses[0], ref_loss)
    for n, g in zip(BODY + ("lm_head",), first_grads):
        rep.compare(f"step 0: g_{n} vs NumPy", g, ref_g[n], atol=1e-5)
    single = compile_example("storylm")
    w = dict(weights)
    ref_losses = []
    for k in range(steps):
        window = np.ascontiguousarray(L.step_windows(cfg, wins, k))
        out = single.train_step(window, w["emb"], causal_mask(), attention_scale(),
                                w["wq"], w["wk"], w["wv"], w["wo"], w["lm_head"], lr)
        ref_losses.append(float(out[0][0, 0]))
        w = dict(zip(WEIGHT_NAMES, out[1:]))
    rep.compare(f"losses of {steps} steps vs single-process train_step", losses, ref_losses,
                atol=1e-5)
    for n, got in zip(WEIGHT_NAMES, vp.body + [lm]):
        rep.compare(f"weights after {steps} steps: {n}", got, w[n], atol=1e-5)
    rep.check("replicated weights identical on every rank", max(spread) == 0.0, f"max spread {max(spread):.1e}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("logits", "step"))
    ap.add_argument("--steps", type=int, default=28, help="vocab-parallel SGD steps to compare")
    ap.add_argument("--opt-level", type=int, default=2, choices=(0, 1, 2, 3))
    ap.add_argument("--timeout", type=float, default=60.0)
    args = ap.parse_args(argv)
    launch = None
    cfg = L.STORYLM0
    try:
        launch = distributed.Launch.from_env()
        lo, hi = distributed.shard_range(cfg.V, launch.world_size, launch.rank, "vocabulary V")
        distributed.require_torch()
        distributed.pin_single_thread(launch.local_rank)
        lib = L.vp_library(cfg, hi - lo, args.opt_level, launch)
        world = distributed.connect(launch, args.timeout)
        weights = load_weights()
        lm_shard = np.ascontiguousarray(weights.pop("lm_head")[:, lo:hi])   # the only columns kept
        rep = Report()
        if args.only in (None, "logits"):
            check_logits(rep, world, lib, weights, lm_shard, lo, hi)
        if args.only in (None, "step"):
            full = load_weights() if world.rank == 0 else None    # rank 0's reference only
            check_step(rep, world, lib, cfg, full or {**weights, "lm_head": None}, lm_shard, lo, hi,
                       args.steps)
        code = np.array([rep.exit_code() if world.rank == 0 else 0], np.int32)
        world.broadcast(code, what="exit code")
    except DistributedError as e:
        distributed.fail(e, launch)
    world.close()
    return int(code[0])


if __name__ == "__main__":
    sys.exit(main())
