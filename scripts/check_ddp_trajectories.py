"""Data-parallel loss trajectories on N = 1, 2, 4 processes vs single-process training
(and the vocabulary-parallel checks on N = 2, 4).

    python scripts/check_ddp_trajectories.py [--configs storylm0,scaled] [--worlds 1,2,4]
                                             [--steps-storylm0 420] [--steps-scaled 100] [--tol 1e-5]
                                             [--vocab-worlds 2,4]

For each configuration (StoryLM-0 as `make demo` trains it; the scaled StoryLM of
examples/storylm.kina at B=4 T=64 D=256 H=8 V=2048) and each world size N, launches
`torchrun --standalone --nproc-per-node N scripts/train_storylm0_ddp.py` and compares its
loss trajectory with single-process SGD on the whole batch (computed here: for StoryLM-0
the demo's train_step of examples/storylm.kina, for the scaled model the same
train_step at its sizes).  Prints one row per run (max |loss difference|, final loss, wall time) and
the machine load; exits 1 if a difference exceeds --tol or a run fails.  Slow (the scaled
model's -O2 builds take tens of seconds each, cached in $KINA_CACHE_DIR), so not part of
`make test`, whose test_distributed.py runs the fast StoryLM-0 N=2 case.  Then runs
scripts/vocab_parallel_storylm0.py (tensor-parallel logits (a)-(c), the vocab-parallel step)
on each of --vocab-worlds processes and reports its verdict and largest error.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _dist_lm as L
import numpy as np

TRAINER = Path(__file__).resolve().parent / "train_storylm0_ddp.py"
VOCAB = Path(__file__).resolve().parent / "vocab_parallel_storylm0.py"


def launch(cfg: L.Config, world: int, steps: int, out: Path, timeout: float) -> tuple[dict | None, str, float]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}",
           str(TRAINER), "--config", cfg.name, "--steps", str(steps), "--losses-out", str(out), "--quiet"]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s", time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    if proc.returncode:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        return None, f"exit code {proc.returncode}:\n{tail}", seconds
    return json.loads(out.read_text()), "", seconds


def vocab_parallel(world: int, timeout: float) -> tuple[bool, str]:
    """(passed, summary) of vocab_parallel_storylm0.py on `world` processes."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}", str(VOCAB)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:.0f} s"
    errs = [float(m) for m in re.findall(r"max\|err\| = (\S+)", proc.stdout)]
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]
    return proc.returncode == 0, f"{last}; largest error {max(errs, default=float('nan')):.3e}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="storylm0,scaled")
    ap.add_argument("--worlds", default="1,2,4")
    ap.add_argument("--steps-storylm0", type=int, default=420)
    ap.add_argument("--steps-scaled", type=int, default=100)
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--vocab-worlds", default="2,4", help="'' to skip the vocabulary-parallel runs")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per launch (builds included)")
    args = ap.parse_args(argv)
    worlds = [int(w) for w in args.worlds.split(",")]
    load0 = os.getloadavg()
    rows, failed = [], False
    with tempfile.TemporaryDirectory(prefix="kina-ddp-") as tmp:
        for name in args.configs.split(","):
            cfg = L.config(name)
            steps = args.steps_storylm0 if name == "storylm0" else args.steps_scaled
            t0 = time.perf_counter()
            ref = np.array(L.single_process_losses(cfg, steps))
            print(f"{name}: single process, {steps} steps: final loss {ref[-1]:.4f} "
                  f"({time.perf_counter() - t0:.1f} s with the build)", flush=True)
            for world in worlds:
                got, err, seconds = launch(cfg, world, steps, Path(tmp) / f"{name}{world}.json", args.timeout)
                if got is None:
                    print(f"{name} N={world}: FAILED ({err})")
                    failed = True
                    continue
                diff = float(np.max(np.abs(np.array(got["losses"]) - ref)))
                failed |= diff > args.tol
                rows.append((name, world, steps, diff, got["losses"][-1], seconds, got["seconds"] / steps))
                print(f"{name} N={world}: max |diff| {diff:.3e}", flush=True)
    vocab = []
    for world in [int(w) for w in args.vocab_worlds.split(",") if w]:
        passed, summary = vocab_parallel(world, args.timeout)
        failed |= not passed
        vocab.append((world, passed, summary))
    load1 = os.getloadavg()
    print(f"\nloss trajectories vs single process (tol {args.tol:g}); load average {load0[0]:.2f} before, "
          f"{load1[0]:.2f} after; {len(os.sched_getaffinity(0))} cores")
    print(f"{'config':<10}{'N':>3}{'steps':>7}{'max |diff|':>13}{'final loss':>12}{'ms/step':>10}{'wall s':>9}")
    for name, world, steps, diff, final, seconds, per_step in rows:
        print(f"{name:<10}{world:>3}{steps:>7}{diff:>13.3e}{final:>12.4f}{per_step * 1e3:>10.2f}{seconds:>9.1f}")
    for world, passed, summary in vocab:
        print(f"vocab-parallel N={world}: {'ok' if passed else 'FAILED'} ({summary})")
    print("FAILED" if failed else "all trajectories and vocab-parallel checks match")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
