"""Semantic tokens on long non-ASCII lines (issue 12, F1).

One function whose let binds an N-value tensor literal on a single line, with a
`// café` comment: before the fix every token walked its line from the start
(4,000 values: 12 s in the server; 400k-character lines: over 10 minutes).
Prints the time of kina_lsp.features.semantic.semantic_tokens per N and the time per
character, which stays flat when the pass is linear.

Run: .venv/bin/python benchmarks/bench_semantic.py [--sizes 1000 4000 40000] [--repeats 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from kina_lsp.convert import LineIndex
from kina_lsp.features import semantic


def program(n: int) -> str:
    values = ", ".join(f"{i % 7}.5" for i in range(n))
    return (f"fn main() -> Tensor[F32, [{n}]] {{ // café\n"
            f"  let x = Tensor[F32, [{n}]] {{ {values} }} in // café\n  x\n}}\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 4000, 40000, 80000])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(f"cores {len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.2f}")
    for n in args.sizes:
        text = program(n)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            index = LineIndex(text, "utf-16")
            tokens = semantic.semantic_tokens(text, index, {"main"}, set())
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        print(f"{n:>7} values  {len(text):>8} chars  {len(tokens.data) // 5:>7} tokens  "
              f"median {med * 1000:8.1f} ms  {med / len(text) * 1e9:6.0f} ns/char")


if __name__ == "__main__":
    main()
