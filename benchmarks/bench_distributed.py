"""Data-parallel scaling of the scaled StoryLM training step on 1 and 2 processes.

    .venv/bin/python benchmarks/bench_distributed.py [--steps 30] [--warmup 3] [--B 4 --T 64 --D 256 --H 8 --V 2048]

Prints ONE table; every figure comes from this run.  The workload is one SGD step of the
scaled StoryLM (examples/storylm.kina with --size, a global batch of B windows of T tokens):

- single process, 1 thread: the compiled `train_step` (-O2), the process pinned
  to one CPU with OMP_NUM_THREADS=1, so every OpenMP parallel loop runs on the calling
  thread (see compiler.distributed.world.pin_single_thread);
- single process, every core: the same step, unpinned (the -O2 kernels spread their
  parallel loops over the OpenMP runtime's threads);
- N = 1 and 2 processes, 1 thread each: scripts/train_storylm0_ddp.py's data-parallel step
  (compiled `grad` on B/N windows, one all-reduce of the loss and gradients, compiled `sgd`),
  launched with torchrun, each rank pinned to its own CPU.

Columns: steps/s (median over --repeats timed blocks of --steps steps after --warmup
steps, then the median over --rounds runs of every row, taken round-robin), the speed-up over the 1-thread single process, the scaling efficiency (speed-up /
threads used), the time per step rank 0 spends in the all-reduce (waiting for the slower
rank included), the all-reduce alone (the same buffer, back to back after a barrier), and
the CPU time per step of the (rank-0) process with the speed-up it implies: on a loaded
machine the wall-clock columns mostly measure the other processes, while a rank's CPU
time per step is its work, which halves on 2 ranks if the split is even and the
collective costs little.
Each measurement runs in its own process (this one only launches them).  The header
gives the cores and the load average before and after: other processes skew every column.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import _dist_lm as L  # noqa: E402

from compiler.distributed import world as distributed  # noqa: E402


def cfg_of(args) -> L.Config:
    return L.config("scaled", batch=args.B, T=args.T, D=args.D, H=args.H, V=args.V)


def timed_blocks(step, args) -> dict:
    """Median wall seconds per step over args.repeats blocks of args.steps steps (after
    warm-up), and the median CPU seconds per step of this process (every thread)."""
    k = 0
    for _ in range(args.warmup):
        step(k)
        k += 1
    wall, cpu = [], []
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.steps):
            step(k)
            k += 1
        wall.append((time.perf_counter() - t0) / args.steps)
        cpu.append((time.process_time() - c0) / args.steps)
    return {"step_s": statistics.median(wall), "cpu_s": statistics.median(cpu)}


# ---- workers (each in its own process) --------------------------------------------------------
def worker_single(args) -> dict:
    cfg = cfg_of(args)
    if args.pin:
        distributed.pin_single_thread()
    lib = L.single_library(2)
    w = L.initial_weights(cfg)
    sets = [[np.array(w[n]) for n in L.WEIGHTS] for _ in range(2)]
    loss = np.zeros((1, 1), np.float32)
    mask, scale = L.constants(cfg)
    lr = np.full((1, 1), cfg.lr, np.float32)
    wins = L.windows(cfg)

    def step(k):
        src, dst = sets[k % 2], sets[1 - k % 2]
        emb, wq, wk, wv, wo, lm = src
        lib.train_step(L.step_windows(cfg, wins, k), emb, mask, scale, wq, wk, wv, wo, lm, lr,
                       out=[loss, *dst], H=cfg.H)
    return timed_blocks(step, args)


def worker_ddp(args) -> dict | None:
    cfg = cfg_of(args)
    launch = distributed.Launch.from_env()
    L.partition(cfg, launch.world_size, launch.rank)
    distributed.pin_single_thread(launch.local_rank)
    lib = L.dp_library(cfg, 2, launch)
    world = distributed.connect(launch, timeout=300)
    trainer = L.DataParallelTrainer(lib, cfg, world, L.initial_weights(cfg))
    world.barrier()
    comm0, calls0 = world.seconds, world.calls
    timed = timed_blocks(trainer.step, args)
    n_steps = args.warmup + args.repeats * args.steps
    in_step = (world.seconds - comm0) / (world.calls - calls0) if world.calls > calls0 else 0.0
    world.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        world.all_reduce(trainer.flat)
    alone = (time.perf_counter() - t0) / args.steps
    world.close()
    if launch.rank:
        return None
    return {**timed, "allreduce_in_step_s": in_step, "allreduce_alone_s": alone,
            "bytes": trainer.flat.nbytes, "steps": n_steps}


# ---- the launcher ---------------------------------------------------------------------------
def run(cmd: list[str], out: Path, env: dict) -> dict:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(out.read_text())


def sizes_args(args) -> list[str]:
    return [f"--{k}={getattr(args, k)}" for k in ("B", "T", "D", "H", "V", "steps", "warmup", "repeats")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("B", 4), ("T", 64), ("D", 256), ("H", 8), ("V", 2048)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--steps", type=int, default=20, help="steps per timed block")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3, help="timed blocks per run")
    ap.add_argument("--rounds", type=int, default=3, help="runs of every row, round-robin (median)")
    ap.add_argument("--worker", choices=("single", "single-all", "ddp"), help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        args.pin = args.worker == "single"
        res = worker_ddp(args) if args.worker == "ddp" else worker_single(args)
        if res is not None:
            args.out.write_text(json.dumps(res))
        return 0

    try:
        distributed.require_torch()
    except distributed.TorchUnavailable as e:
        print(f"bench_distributed: skipped: {e}")
        return 0
    cfg = cfg_of(args)
    env = dict(os.environ)
    me = [sys.executable, str(Path(__file__).resolve())]
    cores, load0 = len(os.sched_getaffinity(0)), os.getloadavg()
    rows = [("single process", 1, 1, me + ["--worker", "single"]),
            ("single process", 1, cores, me + ["--worker", "single-all"])]
    for n in (1, 2):
        rows.append(("data parallel", n, n, [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                             f"--nproc-per-node={n}", *me[1:], "--worker", "ddp"]))
    rounds: list[list[dict]] = [[] for _ in rows]
    with tempfile.TemporaryDirectory(prefix="kina-bench-dist-") as tmp:
        # Round-robin over the rows, so that a change of the machine's load hits every row alike.
        for k in range(args.rounds):
            for i, (_, _, _, cmd) in enumerate(rows):
                out = Path(tmp) / f"row{i}-{k}.json"
                rounds[i].append(run(cmd + ["--out", str(out), *sizes_args(args)], out, env))
    results = [(label, procs, threads, {key: statistics.median(r[key] for r in rs) for key in rs[0]})
               for (label, procs, threads, _), rs in zip(rows, rounds)]
    load1 = os.getloadavg()
    base, base_cpu = results[0][3]["step_s"], results[0][3]["cpu_s"]
    print(f"scaled StoryLM training step, global batch B={cfg.batch} T={cfg.T} D={cfg.D} H={cfg.H} "
          f"V={cfg.V} (-O2); {cores} cores usable; load average {load0[0]:.2f} before, {load1[0]:.2f} after; "
          f"median over {args.rounds} rounds of the median of {args.repeats} x {args.steps} steps")
    print(f"{'run':<16}{'procs':>6}{'threads':>8}{'steps/s':>9}{'ms/step':>9}{'speed-up':>9}{'effic.':>8}"
          f"{'allreduce ms/step':>19}{'alone ms':>10}{'cpu ms/step':>13}{'cpu speed-up':>14}")
    for label, procs, threads, r in results:
        speed = base / r["step_s"]
        ar = f"{r['allreduce_in_step_s'] * 1e3:>19.2f}{r['allreduce_alone_s'] * 1e3:>10.2f}" if "bytes" in r else \
            f"{'-':>19}{'-':>10}"
        cpu = f"{r['cpu_s'] * 1e3:>13.2f}{base_cpu / r['cpu_s']:>13.2f}x" if procs > 1 or threads == 1 else \
            f"{r['cpu_s'] * 1e3:>13.2f}{'-':>14}"
        print(f"{label:<16}{procs:>6}{threads:>8}{1 / r['step_s']:>9.2f}{r['step_s'] * 1e3:>9.2f}{speed:>8.2f}x"
              f"{speed / threads:>8.0%}{ar}{cpu}")
    mb = results[-1][3]["bytes"] / 1e6
    print(f"all-reduce: one {mb:.1f} MB F32 buffer (loss + every gradient) per step, gloo over loopback")
    return 0


if __name__ == "__main__":
    sys.exit(main())
