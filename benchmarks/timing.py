"""Timing helpers shared by the benchmarks: medians, interleaved rounds, the FMA peak, the machine line.

The machine is shared (2 cores, other processes come and go), so a benchmark that
compares implementations times them in interleaved rounds (`interleaved`): every
round runs each implementation for about the same wall time, in a rotating order,
and the figure of an implementation is its median over the rounds.  A burst of
load then hits every implementation in the same round instead of one of them, and
the ratios between them stay meaningful when the absolute figures do not.  Each
implementation's calls start after a short pause (`SETTLE_S`), so the idle threads of
the one before (OpenBLAS's spin for a while) do not run beside them.
"""
from __future__ import annotations

import ctypes
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def calls_for(fn: Callable[[], object], budget: float) -> int:
    """How many calls of fn fill about `budget` seconds (after one warm-up call)."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    return max(1, int(budget / once))


def median_time(fn: Callable[[], object], repeats: int, budget: float = 0.2) -> float:
    """Median seconds per call over `repeats` runs of n calls (n sized to ~budget/repeats s)."""
    n = calls_for(fn, budget / repeats)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n)
    return statistics.median(samples)


# Pause before each implementation's calls in `interleaved`: the thread pools of the one
# before go idle first.  OpenBLAS's threads spin (yielding) for 2^28 cycles after a call
# and took the second core from the next implementation's threads: a 512 matmul of Kina
# measured 137-168 GFLOP/s right after NumPy's round and 185-189 alone (NumPy 176-185).
SETTLE_S = 0.15


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, budget: float = 0.3,
                settle: float = SETTLE_S) -> dict[str, float]:
    """Median seconds per call of each fn over `rounds` interleaved rounds.

    Each round times n calls of every fn (n sized so that one round of a fn takes
    about `budget` seconds), starting one fn later each round, each after a pause of
    `settle` seconds (SETTLE_S)."""
    names = list(fns)
    counts = {k: calls_for(fns[k], budget) for k in names}
    samples: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            fn, n = fns[k], counts[k]
            time.sleep(settle)
            fn()   # one call after the pause, untimed: it wakes this implementation's threads
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[k].append((time.perf_counter() - t0) / n)
    return {k: statistics.median(v) for k, v in samples.items()}


PEAK_C = r"""
/* The widest FMA the host compiles for: 16 floats with AVX-512 (a host with 512-bit FMA units,
   e.g. Zen 5 or a Xeon, does twice the work per instruction of 8-float vectors), else 8. */
#ifdef __AVX512F__
#define W 16
#else
#define W 8
#endif
typedef float vw __attribute__((vector_size(W * 4)));
int kina_peak_width(void) { return W; }
/* 12 independent FMA chains: bound by FMA throughput, not latency. */
float kina_peak(long iters) {
  vw a[12], b, c;
  for (int j = 0; j < W; j++) { b[j] = 1.000001f; c[j] = 1e-7f; }
  for (int i = 0; i < 12; i++) a[i] = c * (float)i;
  for (long n = 0; n < iters; n++)
    for (int i = 0; i < 12; i++) a[i] = a[i] * b + c;
  vw s = a[0];
  for (int i = 1; i < 12; i++) s += a[i];
  float r = 0; for (int i = 0; i < W; i++) r += s[i];
  return r;
}
"""


def peak_gflops(tmp: Path, repeats: int) -> float | None:
    """Single-core f32 peak of an FMA kernel built with cc -O3 -march=native (None without cc).
    The best of the repeats: the peak is what the core can do, not what a contended core did."""
    src, so = tmp / "peak.c", tmp / "peak.so"
    src.write_text(PEAK_C)
    cc = os.environ.get("KINA_CC", "cc")
    try:
        built = subprocess.run([cc, "-O3", "-march=native", "-shared", "-fPIC", str(src), "-o", str(so)])
    except OSError:
        return None
    if built.returncode:
        return None
    lib = ctypes.CDLL(str(so))
    fn, width = lib.kina_peak, lib.kina_peak_width()
    fn.argtypes, fn.restype = [ctypes.c_long], ctypes.c_float
    iters = 2_000_000
    fn(iters)
    best = float("inf")
    for _ in range(max(repeats, 3)):
        t0 = time.perf_counter()
        fn(iters)
        best = min(best, time.perf_counter() - t0)
    return iters * 12 * width * 2 / best / 1e9


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cores() -> int:
    return len(os.sched_getaffinity(0))


def load() -> float:
    return os.getloadavg()[0]


def machine_line() -> str:
    avx512 = ""
    try:
        avx512 = ", AVX-512" if " avx512f" in Path("/proc/cpuinfo").read_text() else ""
    except OSError:
        pass
    return f"{cpu_model()}{avx512}; {cores()} cores usable; Python {platform.python_version()}"
