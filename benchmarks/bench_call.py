"""Per-call overhead of the Python runtime (target: <= 5 us per call).

    .venv/bin/python benchmarks/bench_call.py [--calls N]

Builds a tiny Kina function (two [2, 3] inputs, one output) and times N calls
with fresh outputs and with reused `out=` buffers; also reports RSS growth."""
import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compiler import build, runtime  # noqa: E402

SOURCE = """
fn step(a: Tensor[F32, [2, 3]], b: Tensor[F32, [2, 3]]) -> Tensor[F32, [2, 3]] {
  a + b
}
"""


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def timed(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=100_000)
    n = ap.parse_args().calls
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "bench.kina"
        src.write_text(SOURCE)
        res = build.build_file(src, Path(tmp) / "bench.so")
        if not res.ok:
            build.print_diagnostics(res)
            return 1
        step = runtime.load(res.so_path).step
        a = np.ones((2, 3), np.float32)
        b = np.full((2, 3), 2.0, np.float32)
        out = np.empty((2, 3), np.float32)
        timed(lambda: step(a, b), 1000)
        before = rss_mb()
        fresh = timed(lambda: step(a, b), n)
        reused = timed(lambda: step(a, b, out=out), n)
        growth = rss_mb() - before
    print(f"{n} calls of step(Tensor[F32,[2,3]] x2):")
    print(f"  fresh outputs   {fresh:6.2f} us/call")
    print(f"  out= reused     {reused:6.2f} us/call   (target <= 5 us)")
    print(f"  RSS growth      {growth:6.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
