"""f32 products of -O2 libraries at each register tile, against NumPy, with aligned operands.

    .venv/bin/python benchmarks/bench_tiles.py [--tiles 4x16 2x32 8x8] [--shapes 512x512x512 ...] [--rounds 7]

benchmarks/matmul.kina (`mm[M, K, N]`) is built with `--size` per shape, cold, at -O2, once per
register tile (`KINA_REGISTER_TILE`, read when the compiler is imported: each tile is built
and timed in a child process of its own).  The operands and the result come from
`runtime.empty` (64-byte aligned, as the step's buffers are); each result is checked
against NumPy, then Kina and NumPy's `matmul(out=)` are timed in interleaved rounds
(benchmarks/timing.py).  Prints GFLOP/s and the fraction of the host's FMA peak (two
cores): the tile's accumulators, not the memory, bound the products on a host whose FMA
latency times FMA units exceeds them (benchmarks/c/fma_chains.c; README "On a Zen 2").
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import timing  # noqa: E402

SOURCE = HERE / "matmul.kina"
SHAPES = ["512x512x512", "256x256x2048", "512x512x8192", "256x2048x256", "256x256x256"]


def parse_shape(text: str) -> tuple[int, int, int]:
    m, k, n = (int(v) for v in text.lower().split("x"))
    return m, k, n


def time_shape(lib, m: int, k: int, n: int, rounds: int, rng) -> dict[str, float]:
    """GFLOP/s of `lib.mm` and NumPy at [m, k] @ [k, n], after checking Kina's result."""
    from compiler.runtime import arrays
    a, b = arrays.empty((m, k), np.float32), arrays.empty((k, n), np.float32)
    a[:], b[:] = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    out, ref = arrays.empty((m, n), np.float32), arrays.empty((m, n), np.float32)
    lib.mm(a, b, out=out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-3 * np.sqrt(k))
    t = timing.interleaved({"kina": lambda: lib.mm(a, b, out=out),
                            "numpy": lambda: np.matmul(a, b, out=ref)}, rounds, budget=0.2)
    return {name: 2.0 * m * k * n / seconds / 1e9 for name, seconds in t.items()}


def child(shapes: list[str], rounds: int) -> list[dict]:
    """Build and time each shape with this process's register tile (its environment)."""
    from bench_scaled import build_lib

    from compiler.backend import transform_library
    tile = "x".join(map(str, transform_library.REGISTER_TILE))
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for text in shapes:
            m, k, n = parse_shape(text)
            lib = build_lib(SOURCE, f"mm_{m}_{k}_{n}", 2, Path(d), {"M": m, "K": k, "N": n})[0]
            rows.append({"shape": text, "tile": tile, **time_shape(lib, m, k, n, rounds, rng)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiles", nargs="+", default=[""], help="MxN register tiles (default: the host's)")
    ap.add_argument("--shapes", nargs="+", default=SHAPES, help="MxKxN products")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.shapes, args.rounds)))
        return
    print(timing.machine_line())
    with tempfile.TemporaryDirectory() as d:
        peak = timing.peak_gflops(Path(d), 5)
    peak_all = peak * timing.cores() if peak else None
    print(f"FMA peak: {peak_all:.1f} GFLOP/s on {timing.cores()} cores" if peak_all else "FMA peak: no cc")
    print(f"{'product':>16} {'tile':>6} {'kina GFLOP/s, % peak':>21} {'numpy':>15}")
    for tile in args.tiles:
        env = dict(os.environ, KINA_REGISTER_TILE=tile)
        run = subprocess.run([sys.executable, __file__, "--child", "--rounds", str(args.rounds),
                              "--shapes", *args.shapes], env=env, capture_output=True, text=True)
        if run.returncode:
            sys.exit(f"tile {tile or 'default'}: {run.stderr.strip().splitlines()[-1]}")
        for row in json.loads(run.stdout.strip().splitlines()[-1]):
            kina, nump = (f"{row[k]:.1f} {row[k] / peak_all:>6.0%}" if peak_all else f"{row[k]:.1f}      -"
                          for k in ("kina", "numpy"))
            print(f"{row['shape']:>16} {row['tile']:>6} {kina:>21} {nump:>15}")
    print(f"load average {timing.load():.2f}")


if __name__ == "__main__":
    main()
