"""Train StoryLM-0 on a 32-token story with the compiled Kina training step.

    python scripts/train_storylm0.py [--steps 420] [--lr 0.3] [--init npz|kina] [--torch | --no-torch] [--out out]

examples/storylm.kina is compiled without --size values, to one host .so for every
size (compiler.build; the sizes are read from the arrays at each call, StoryLM-0's being
B=1, T=4, H=2, DH=2, V=8), and its `train_step` (decoder + mean next-token NLL + reverseMode + SGD on every
weight) is called once per step from Python, on the sliding windows of T+1 = 5
story tokens (inputs: the first 4, targets: the next 4), in order, cycling.
Starting weights: examples/storylm0_weights.npz, or with --init kina the library's `init`
(normal draws in Kina from one key, split per weight).

Prints a plain-text progress bar with the loss, writes the loss curve to
OUT/storylm0_loss.png (matplotlib, Agg; skipped with a message when matplotlib
is missing), and ends with the final loss and a greedy continuation of the
prompt "the cat sat down" (the compiled `forward` + argmax in NumPy), a sampled one
(`sample_next`: temperature 0.8, top-4, top-p 0.9, one library call per token), and the
continuation that reads the whole sequence so far at each token (`next_token` at
T = 4, 5, ...: the same library at a new size per call).  With
torch installed (or --torch), the same training runs in PyTorch eager from the
same weights and the max difference of the two loss trajectories is reported.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from report import compile_example
from storylm_data import PROMPT, ROOT, T, V, corpus_windows, decode, load_story
from storylm_torch import torch_or_none
from storylm_train import DEMO_LR, CompiledTrainer, kina_init, train_torch

BAR_WIDTH = 30


def progress(steps: int, every: int):
    """An on_step callback drawing `[#####.....] step k/N  loss x` on one terminal line
    (redrawn in place on a terminal; one line per tenth of the run in a log)."""
    tty = sys.stdout.isatty()
    if not tty:
        every = max(every, steps // 10)

    def draw(k: int, loss: float) -> None:
        if (k + 1) % every and k + 1 != steps:
            return
        filled = BAR_WIDTH * (k + 1) // steps
        line = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] step {k + 1:>4}/{steps}  loss {loss:.4f}"
        if tty:
            print("\r" + line, end="\n" if k + 1 == steps else "", flush=True)
        else:
            print(line, flush=True)
    return draw


def plot(losses: list[float], torch_losses: list[float] | None, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot: skipped (matplotlib not installed)")
        return
    epoch = len(corpus_windows())
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(losses, lw=0.8, alpha=0.5, label="compiled Kina step (per window)")
    means = np.convolve(losses, np.ones(epoch) / epoch, mode="valid")
    ax.plot(range(epoch - 1, len(losses)), means, lw=2, label=f"running mean over one epoch ({epoch} windows)")
    if torch_losses is not None:
        ax.plot(torch_losses, "k:", lw=0.8, label="PyTorch eager")
    ax.set(xlabel="step", ylabel="mean next-token NLL", title="StoryLM-0 on the 32-token story")
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    print(f"plot: {path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=420, help="SGD steps (one window each; 28 windows per epoch)")
    ap.add_argument("--lr", type=float, default=DEMO_LR)
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--torch", dest="torch", action="store_true", default=None,
                       help="also train in PyTorch (default: when torch is importable)")
    group.add_argument("--no-torch", dest="torch", action="store_false")
    ap.add_argument("--out", type=Path, default=ROOT / "out")
    ap.add_argument("--generate", type=int, default=12, help="tokens of greedy continuation")
    ap.add_argument("--init", choices=("npz", "kina"), default="npz",
                    help="starting weights: examples/storylm0_weights.npz, or drawn by the library's init")
    ap.add_argument("--seed", type=int, default=26, help="the key [0, seed] of --init kina and of sampling")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    # No --size: one dynamic library for every size (issue 25); StoryLM-0's come from the arrays.
    lib = compile_example("storylm", sizes={})
    print(f"compiled examples/storylm.kina (dynamic: any B, T, H, DH, V) in {time.perf_counter() - t0:.2f} s")
    if args.init == "kina":
        print(f"starting weights: init(key=[0, {args.seed}]) in Kina (normals / sqrt(D), one key per weight)")
    start = kina_init(lib, (0, args.seed)) if args.init == "kina" else None
    trainer = CompiledTrainer(lib, args.lr, start)
    story = load_story()
    print(f"story ({len(story)} tokens, V={V}): {decode(story)}")
    t0 = time.perf_counter()
    losses = trainer.train(args.steps, progress(args.steps, max(1, args.steps // 60)))
    elapsed = time.perf_counter() - t0
    epoch = len(trainer.windows)
    print(f"{args.steps} steps in {elapsed * 1e3:.1f} ms ({elapsed / args.steps * 1e6:.1f} us/step)")

    torch_losses = None
    torch = torch_or_none() if args.torch is not False else None
    if args.torch and torch is None:
        print("torch: requested but not installed")
        return 2
    if torch is None:
        print("torch: skipped (not installed)" if args.torch is None else "torch: skipped (--no-torch)")
    else:
        torch_losses, _ = train_torch(torch, args.steps, args.lr, start)
        diff = np.max(np.abs(np.array(losses) - np.array(torch_losses)))
        print(f"torch {torch.__version__}: max |loss_kina - loss_torch| over {args.steps} steps = {diff:.3e}")

    plot(losses, torch_losses, args.out / "storylm0_loss.png")
    first, last = np.mean(losses[:epoch]), np.mean(losses[-epoch:])
    print(f"initial loss {losses[0]:.4f}; final loss {losses[-1]:.4f} "
          f"(mean over an epoch: first {first:.4f} -> last {last:.4f})")
    text = trainer.greedy(PROMPT, args.generate)
    print(f"greedy: {decode(text[:T])} | {decode(text[T:])}")
    sampled = trainer.sample(PROMPT, args.generate, (0, args.seed), temperature=0.8, top_k=4, top_p=0.9)
    print(f"sampled (T=0.8, top-4, top-p 0.9, key [0, {args.seed}]): {decode(sampled[:T])} | {decode(sampled[T:])}")
    grown = trainer.greedy_growing(PROMPT, args.generate)
    print(f"greedy over the whole sequence (T = {T}..{T + args.generate - 1}, one library): "
          f"{decode(grown[:T])} | {decode(grown[T:])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
