"""Products of few rows (a decode step's [1, D] @ [D, V]) in a dynamic -O2 library against the
static one built for their sizes.

    .venv/bin/python benchmarks/bench_small_rows.py [--rounds 9]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_small_rows.py      # one core

benchmarks/matmul.kina (`mm[M, K, N]`) is built once without `--size` (dynamic: one library
for every size, docs/compiling.md "Dynamic sizes") and once per shape with `--size` (static),
cold, at -O2.  Each shape's two libraries are checked against NumPy, then timed in
interleaved rounds (benchmarks/timing.py, out= reused): median ms per call, and dynamic /
static.  The shapes: single rows (wide, deep, small), rows fewer than a register tile, one
tile and a row past it.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import timing  # noqa: E402
from bench_scaled import build_lib  # noqa: E402

SOURCE = HERE / "matmul.kina"
SHAPES = [(1, 2048, 2048), (1, 1024, 4096), (1, 256, 2048), (1, 64, 64), (2, 512, 512), (3, 64, 2048),
          (4, 2048, 2048), (4, 256, 1024), (7, 300, 500), (9, 40, 200), (8, 2048, 2048)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    print(timing.machine_line())
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        dynamic = build_lib(SOURCE, "dynamic", 2, tmp, {})[0]
        rng = np.random.default_rng(0)
        print(f"{'product':>24}  {'static ms':>10}  {'dynamic ms':>10}  dynamic / static")
        for m, k, n in SHAPES:
            static = build_lib(SOURCE, f"mm_{m}_{k}_{n}", 2, tmp, {"M": m, "K": k, "N": n})[0]
            a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
            outs = {name: np.empty((m, n), np.float32) for name in ("static", "dynamic")}
            libs = {"static": static, "dynamic": dynamic}
            for name, lib in libs.items():
                lib.mm(a, b, out=outs[name])
                np.testing.assert_allclose(outs[name], a @ b, rtol=1e-4, atol=1e-3 * np.sqrt(k))
            times = timing.interleaved({name: (lambda lib=lib, o=outs[name], a=a, b=b: lib.mm(a, b, out=o))
                                        for name, lib in libs.items()}, args.rounds, budget=0.1)
            s, dy = times["static"] * 1e3, times["dynamic"] * 1e3
            print(f"{f'[{m}, {k}] @ [{k}, {n}]':>24}  {s:10.4f}  {dy:10.4f}  {dy / s:.2f}x")
    print(f"load average {timing.load():.2f}")


if __name__ == "__main__":
    main()
