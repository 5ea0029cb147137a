"""Training throughput of StoryLM-0: compiled Kina step vs. NumPy vs. PyTorch eager.

    python benchmarks/bench_train.py [--steps 2000]

Each implementation runs the same SGD training (decoder + mean next-token NLL +
backward + update of every weight, lr 0.3, story windows in order) from the same
weights, once, after a short warm-up:

- kina:  examples/storylm.kina at StoryLM-0's sizes compiled with -O2, called through
         compiler.runtime.library (Python call overhead included), two ways:
         out= reused (scripts/storylm_train.py CompiledTrainer: two preallocated weight
         sets, step k reads one and writes the other) and functional (each step
         returns fresh arrays that become the next step's weights, as in
         `loss, *w = train_step(x, *w, ...)`: every call sees new arrays);
- numpy: the hand-written float32 NumPy forward/backward of scripts/storylm_numpy.py;
- torch: PyTorch eager with autograd, once with one intra-op thread (the tensors
         are tiny and the compiled step is single-threaded too) and once with
         torch's default thread count; skipped when torch is not installed.

Prints steps/second, the speed-up of each compiled run over every other
implementation, and the verdict against the target (>= 100x over PyTorch eager)
for both compiled runs against both torch rows.
The loss after the same number of steps is printed as a check that every run
trained the same model.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from report import compile_example  # noqa: E402
from storylm_data import TRAINABLE, attention_scale, causal_mask, corpus_windows, load_weights  # noqa: E402
from storylm_torch import torch_or_none  # noqa: E402
from storylm_train import DEMO_LR, CompiledTrainer, train_numpy, train_torch  # noqa: E402

LR = DEMO_LR
WARMUP = 10
TARGET_VS_TORCH = 100.0


def timed(run, steps: int) -> tuple[float, list[float]]:
    """(steps per second, losses) of run(steps) -> losses, after a warm-up run."""
    run(WARMUP)
    t0 = time.perf_counter()
    losses = run(steps)
    return steps / (time.perf_counter() - t0), losses


def train_functional(lib, steps: int, lr: float) -> list[float]:
    """The CompiledTrainer's SGD run written functionally: no out=, every step's
    result arrays are the next step's weights."""
    w = load_weights()
    weights = [np.array(w[n], np.float32) for n in TRAINABLE]
    mask, scale = causal_mask(), attention_scale()
    lr_arr = np.full((1, 1), lr, np.float32)
    windows = [np.ascontiguousarray(win) for win in corpus_windows()]
    step, losses = lib.train_step, []
    for k in range(steps):
        emb, wq, wk, wv, wo, lm = weights
        loss, *weights = step(windows[k % len(windows)], emb, mask, scale, wq, wk, wv, wo, lm, lr_arr)
        losses.append(float(loss[0, 0]))
    return losses


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000, help="steps for the compiled run")
    ap.add_argument("--slow-steps", type=int, default=200, help="steps for the NumPy and PyTorch runs")
    args = ap.parse_args(argv)
    common = min(args.steps, args.slow_steps)

    lib = compile_example("storylm")
    rates = {"kina -O2, out= reused": timed(lambda n: CompiledTrainer(lib, LR).train(n), args.steps),
             "kina -O2, functional": timed(lambda n: train_functional(lib, n, LR), args.steps),
             "numpy (float32)": timed(lambda n: train_numpy(n, LR)[0], args.slow_steps)}
    torch = torch_or_none()
    if torch is None:
        print("torch: skipped (not installed)")
    else:
        default_threads = torch.get_num_threads()
        torch.set_num_threads(1)
        rates["torch eager (1 thread)"] = timed(lambda n: train_torch(torch, n, LR)[0], args.slow_steps)
        torch.set_num_threads(default_threads)
        rates[f"torch eager ({default_threads} threads)"] = timed(lambda n: train_torch(torch, n, LR)[0],
                                                                  args.slow_steps)
        print(f"torch {torch.__version__}")

    kinas = [(name, rate) for name, (rate, _) in rates.items() if name.startswith("kina")]
    print(f"{'implementation':<28}{'steps/s':>10}{'us/step':>10}"
          + "".join(f"{'x ' + name[9:]:>16}" for name, _ in kinas) + f"{f'loss@{common}':>12}")
    for name, (rate, losses) in rates.items():
        print(f"{name:<28}{rate:>10.0f}{1e6 / rate:>10.1f}"
              + "".join(f"{k / rate:>15.1f}x" for _, k in kinas) + f"{losses[common - 1]:>12.4f}")
    torch_rows = [(name, rate) for name, (rate, _) in rates.items() if name.startswith("torch")]
    if len(torch_rows) == 2 and torch_rows[1][1] < torch_rows[0][1] / 2:
        print(f"note: {torch_rows[1][0]} is {torch_rows[0][1] / torch_rows[1][1]:.0f}x slower than 1 thread: "
              f"the cores are contended (load average {os.getloadavg()[0]:.2f}); compare against the 1-thread row")
    for kname, kina in kinas:
        for name, (rate, _) in rates.items():
            if name.startswith("torch"):
                ratio = kina / rate
                verdict = "met" if ratio >= TARGET_VS_TORCH else "NOT met"
                print(f"target {kname} >= {TARGET_VS_TORCH:.0f}x {name}: {ratio:.0f}x ({verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
