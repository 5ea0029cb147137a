"""`kinac fmt` speed: every example, and a generated 1,000-line file (100 functions of
10 lines, the bench_lsp.py source) plus one 40,000-value literal line.

Prints the median time per file and per 1,000 lines.  Formatting includes the safety
check of the result (a second parse and an AST comparison), as `kinac fmt` runs it.

Run: .venv/bin/python benchmarks/bench_format.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_lsp import make_source  # noqa: E402

from compiler.format.formatter import format_source  # noqa: E402


def timed(text: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        format_source(text)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(f"cores {len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.2f}")
    cases = [(Path(p).name, Path(p).read_text(encoding="utf-8")) for p in sorted(glob.glob("examples/*.kina"))]
    cases.append(("generated 1,000 lines", make_source()))
    values = ", ".join(f"{i % 7}.5" for i in range(40000))
    cases.append(("40,000-value literal", f"fn main() -> Tensor[F32, [40000]] {{\n  Tensor[F32, [40000]] {{ {values} }}\n}}\n"))
    for name, text in cases:
        med = timed(text, args.repeats)
        lines = text.count("\n") + 1
        print(f"{name:<34} {lines:>6} lines  {len(text):>8} chars  median {med * 1000:8.1f} ms  "
              f"{med * 1000 / lines * 1000:8.1f} ms/1k lines")


if __name__ == "__main__":
    main()
