"""Data-parallel training of StoryLM on N processes, through torch.distributed (gloo).

    torchrun --nproc-per-node 2 scripts/train_storylm0_ddp.py [--steps 420] [--lr 0.3]
    torchrun --nproc-per-node 2 scripts/train_storylm0_ddp.py --config scaled [--steps 100]
    options: [--batch G] [--epoch-batches] [--compare] [--checkpoint PATH [--checkpoint-every K] [--resume]]
             [--losses-out FILE.json] [--timeout S] [--opt-level L] [--no-pin] [--quiet]

Every rank builds nothing twice: local rank 0 compiles examples/distributed/lm_data_parallel.kina
with --size for T, H, DH and V only (compiler.distributed.world.build_shared): B stays
dynamic, so every rank loads the same .so whatever its number of windows.  A step's
batch*T next-token predictions are split over the N ranks: B or B+1 whole windows each
(B = batch // N; the batch need not be a multiple of N), or, with fewer windows than
ranks (StoryLM-0's single window), contiguous parts of the positions; each rank runs
the compiled `grad` on its part (a loss weight of 1/(batch*T) on its predictions), one
all-reduce sums the loss parts and the gradients in place, and every rank applies the
same compiled `sgd`.  --epoch-batches walks the corpus in epochs whose last batch holds
the windows left (fewer than --batch when it does not divide them): split again, through
the same library.  With --config storylm0 (the default) the model, weights, story,
schedule and lr are `make demo`'s (scripts/train_storylm0.py), so the losses are the same;
--compare trains the single-process reference on rank 0 and prints the max difference
(exit 1 above --tol).  Each rank runs on one CPU, single-threaded (--no-pin: not).

--checkpoint PATH saves the weights, the step and the losses every K steps and at the end
(rank 0 writes the .npz atomically); --resume continues from PATH when it exists (the
same trajectory as an uninterrupted run; the world size may differ).  A rank whose peer
dies exits with a message within --timeout seconds (exit code 3).
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from pathlib import Path

import _dist_lm as L
import numpy as np
from storylm_data import PROMPT, T, decode

from compiler.distributed import checkpoint
from compiler.distributed import world as distributed
from compiler.distributed.world import DistributedError


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=("storylm0", "scaled"), default="storylm0")
    ap.add_argument("--steps", type=int, help="SGD steps (storylm0: 420, scaled: 100)")
    ap.add_argument("--lr", type=float, help="learning rate (storylm0: 0.3, scaled: 0.1)")
    ap.add_argument("--batch", type=int, help="windows per step (storylm0: 1, scaled: 4)")
    ap.add_argument("--epoch-batches", action="store_true",
                    help="epochs over the corpus in order: the last batch of an epoch may be shorter")
    ap.add_argument("--corpus-len", type=int, help="scaled: tokens of the synthetic corpus (default 4096)")
    for n in ("T", "D", "H", "V"):
        ap.add_argument(f"--{n}", type=int, help="scaled sizes (default T=64 D=256 H=8 V=2048)")
    ap.add_argument("--opt-level", type=int, default=2, choices=(0, 1, 2, 3))
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a collective may wait for a peer")
    ap.add_argument("--compare", action="store_true", help="also train single-process on rank 0 and compare")
    ap.add_argument("--tol", type=float, default=1e-5, help="max |loss difference| --compare accepts")
    ap.add_argument("--checkpoint", type=Path)
    ap.add_argument("--checkpoint-every", type=int, default=50)
    ap.add_argument("--resume", action="store_true", help="continue from --checkpoint when it exists")
    ap.add_argument("--losses-out", type=Path, help="rank 0 writes the losses and timings as JSON")
    ap.add_argument("--no-pin", action="store_true", help="do not pin each rank to one CPU")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.resume and not args.checkpoint:
        ap.error("--resume needs --checkpoint PATH")
    for name in ("steps", "batch", "checkpoint_every", "timeout", "corpus_len"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive, not {value}")
    if args.config == "storylm0" and any(getattr(args, n) for n in ("T", "D", "H", "V", "corpus_len")):
        ap.error("--T/--D/--H/--V/--corpus-len apply to --config scaled only")
    return args


def setup(args, launch):
    """(config, library, world): everything that can fail before the first step."""
    cfg = L.config(args.config, steps=args.steps, lr=args.lr, batch=args.batch, T=args.T, D=args.D, H=args.H,
                   V=args.V, corpus_len=args.corpus_len, epoch_batches=args.epoch_batches or None)
    if cfg.corpus_len and cfg.corpus_len <= cfg.T:
        raise distributed.ShardingError(f"--corpus-len {cfg.corpus_len} holds no window of T+1 = {cfg.T + 1} tokens")
    L.check_partitions(cfg, launch.world_size, len(L.windows(cfg)))
    distributed.require_torch()
    if not args.no_pin:
        distributed.pin_single_thread(launch.local_rank)
    lib = L.dp_library(cfg, args.opt_level, launch)
    return cfg, lib, distributed.connect(launch, args.timeout)


def restore(args, world, trainer, cfg) -> tuple[int, list[float]]:
    """(first step, losses so far): from the checkpoint with --resume, else a fresh start."""
    if not args.checkpoint or not checkpoint.exists(world, args.checkpoint):
        if args.resume and world.rank == 0:
            print(f"no checkpoint at {args.checkpoint} yet: starting at step 0")
        return 0, []
    if not args.resume:
        raise checkpoint.CheckpointError(f"{args.checkpoint} exists: pass --resume to continue it, "
                                         f"or choose another --checkpoint path")
    step, meta = checkpoint.load(world, args.checkpoint, trainer.weights)
    theirs = {k: meta.get(k) for k in cfg.meta()}
    if theirs != cfg.meta():
        diff = ", ".join(f"{k}: {theirs[k]} there, {v} here" for k, v in cfg.meta().items() if theirs[k] != v)
        raise checkpoint.CheckpointError(f"{args.checkpoint} is from another run ({diff})")
    if step > cfg.steps:
        raise checkpoint.CheckpointError(f"{args.checkpoint} is at step {step}, beyond --steps {cfg.steps}")
    if world.rank == 0:
        print(f"resuming from {args.checkpoint} at step {step} (saved by {meta['world_size']} process(es))")
    return step, list(meta["losses"])


def train(args, cfg, world, trainer, start, losses, launch) -> float:
    every = max(1, cfg.steps // 10)
    t0 = time.perf_counter()
    for k in range(start, cfg.steps):
        losses.append(trainer.step(k))
        done = k + 1
        if world.rank == 0 and not args.quiet and (done % every == 0 or done == cfg.steps):
            print(f"step {done:>5}/{cfg.steps}  loss {losses[-1]:.4f}", flush=True)
        if args.checkpoint and (done % args.checkpoint_every == 0 or done == cfg.steps):
            checkpoint.save(world, args.checkpoint, done, trainer.weights,
                            {**cfg.meta(), "losses": losses, "world_size": world.size})
        distributed.inject_fault(launch, done)
    return time.perf_counter() - t0


def report(args, cfg, world, trainer, losses, elapsed, start) -> int:
    n = cfg.steps - start
    per_step = elapsed / max(n, 1)
    print(f"{world.size} process(es), {cfg.describe()}")
    print(f"{n} steps in {elapsed:.2f} s ({per_step * 1e6:.1f} us/step, {1 / per_step:.1f} steps/s; "
          f"collectives {world.seconds / max(n, 1) * 1e6:.1f} us/step)")
    epoch = max(1, min(len(trainer.windows) // cfg.batch, cfg.steps // 2))
    print(f"initial loss {losses[0]:.4f}; final loss {losses[-1]:.4f} (mean over {epoch} steps: "
          f"first {np.mean(losses[:epoch]):.4f} -> last {np.mean(losses[-epoch:]):.4f})")
    print(f"library: {trainer.lib.path.name} (B dynamic), one for every rank; windows per rank: "
          + "; ".join(f"batch {b}: {rows_per_rank(cfg, world.size, b)}"
                      for b in L.batch_sizes(cfg, len(trainer.windows))))
    if cfg.name == "storylm0":
        print(f"greedy: {greedy(trainer)}")
    if args.checkpoint:
        print(f"checkpoint: {args.checkpoint.resolve()} on host {socket.gethostname()} (step {cfg.steps})")
    code = 0
    if args.compare:
        ref = L.single_process_losses(cfg, cfg.steps, args.opt_level)
        diff = float(np.max(np.abs(np.array(losses) - np.array(ref))))
        ok = diff <= args.tol
        print(f"single process: max |loss_ddp - loss_single| over {cfg.steps} steps = {diff:.3e} "
              f"({'ok' if ok else 'MISMATCH'}, tol {args.tol:g})")
        code = 0 if ok else 1
    if args.losses_out:
        args.losses_out.parent.mkdir(parents=True, exist_ok=True)
        args.losses_out.write_text(json.dumps({
            "config": cfg.meta(), "world_size": world.size, "losses": losses, "first_step": start,
            "seconds": elapsed, "collective_seconds": world.seconds, "collective_calls": world.calls}))
    return code


def rows_per_rank(cfg, world_size: int, batch: int) -> str:
    return ", ".join(str(s.rows[1] - s.rows[0]) for s in (L.partition(cfg, world_size, r, batch)
                                                          for r in range(world_size)))


def greedy(trainer, n_new: int = 12) -> str:
    """The demo's greedy continuation of the prompt, from the compiled `predict` (at B = 1)."""
    w, toks = trainer.weights, list(PROMPT.reshape(-1))
    for _ in range(n_new):
        ids = np.array([toks[-T:]], dtype=np.int64)
        logits = trainer.lib.predict(ids, w["emb"], trainer.mask, trainer.scale, w["wq"], w["wk"], w["wv"],
                                     w["wo"], w["lm_head"])
        toks.append(int(np.argmax(logits[0, -1])))
    return f"{decode(toks[:T])} | {decode(toks[T:])}"


def main(argv=None) -> int:
    args = parse(argv)
    launch = None
    try:
        launch = distributed.Launch.from_env()
        cfg, lib, world = setup(args, launch)
        trainer = L.DataParallelTrainer(lib, cfg, world, L.initial_weights(cfg))
        start, losses = restore(args, world, trainer, cfg)
        elapsed = train(args, cfg, world, trainer, start, losses, launch)
    except DistributedError as e:
        distributed.fail(e, launch)
    code = report(args, cfg, world, trainer, losses, elapsed, start) if world.rank == 0 else 0
    world.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
