"""Per-call overhead of the Python runtime (target: <= 5 us per call of the StoryLM-0 step).

    .venv/bin/python benchmarks/bench_call.py [--calls N]

Times N calls, median of 5 runs, of
- a tiny Kina function (two [2, 3] inputs, one output) built at -O0: with fresh
  outputs (out=None) and with reused out= buffers;
- the StoryLM-0 training step (examples/storylm0_train_step.kina, 11 inputs and
  7 outputs) built at -O2, through the runtime with reused out= buffers and with
  fresh outputs, with a weight rebound to a new array every call (the argument
  set is bound from scratch), and its packed C entry point called directly (the
  compute plus one ctypes call);
- an empty ctypes call (labs from libc), the floor of any Python -> C call.
Every call through the runtime probes every array (dtype, shape, flags: ~0.16 us
each); a remembered argument set saves the binding (data pointers, descriptors).
Also reports RSS growth over the runs (the runtime keeps no array alive)."""
import argparse
import ctypes
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from compiler import build, runtime  # noqa: E402

SOURCE = """
fn step(a: Tensor[F32, [2, 3]], b: Tensor[F32, [2, 3]]) -> Tensor[F32, [2, 3]] {
  a + b
}
"""


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def timed(fn, n: int, runs: int = 5) -> float:
    """Median microseconds per call over `runs` runs of n calls."""
    fn()
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(samples)


def storylm0_step(tmp: Path):
    """(call through the runtime, direct packed call) of the -O2 StoryLM-0 training step."""
    import _common as C
    res = build.build_file(ROOT / "examples" / "storylm0_train_step.kina", tmp / "ts.so", 2)
    if not res.ok:
        build.print_diagnostics(res)
        raise SystemExit(1)
    f = runtime.load(res.so_path).train_step
    w = C.load_weights()
    weights = [np.array(w[n], np.float32) for n in C.TRAINABLE]
    args = (np.ascontiguousarray(C.corpus_windows()[0]), weights[0], C.causal_mask(), C.attention_scale(),
            *weights[1:], np.full((1, 1), 0.25, np.float32), np.full((1, 1), 0.1, np.float32))
    out = [np.empty((1, 1), np.float32)] + [np.empty_like(x) for x in weights]
    f(*args, out=out)
    argset = next(iter(f._memo.values()))
    state = {"emb": args[1]}

    def rebinding():   # emb = emb + 0: a new array every call, as in functional SGD updates
        state["emb"] = np.add(state["emb"], 0.0, dtype=np.float32)
        return f(args[0], state["emb"], *args[2:], out=out)

    return {"out=": lambda: f(*args, out=out), "fresh": lambda: f(*args), "rebinding": rebinding,
            "raw": lambda: f._call(argset.address)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=100_000)
    n = ap.parse_args().calls
    print(f"{len(os.sched_getaffinity(0))} cores usable; load average {os.getloadavg()[0]:.2f}; "
          f"median of 5 runs of {n} calls")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = tmp / "bench.kina"
        src.write_text(SOURCE)
        res = build.build_file(src, tmp / "bench.so")
        if not res.ok:
            build.print_diagnostics(res)
            return 1
        step = runtime.load(res.so_path).step
        a = np.ones((2, 3), np.float32)
        b = np.full((2, 3), 2.0, np.float32)
        out = np.empty((2, 3), np.float32)
        lm = storylm0_step(tmp)
        libc = ctypes.CDLL(None).labs
        before = rss_mb()
        rows = [("step [2,3] x2, fresh outputs", timed(lambda: step(a, b), n)),
                ("step [2,3] x2, out= reused", timed(lambda: step(a, b, out=out), n)),
                ("StoryLM-0 train_step -O2, out= reused", timed(lm["out="], n)),
                ("StoryLM-0 train_step -O2, fresh outputs", timed(lm["fresh"], n)),
                ("  out=, a weight rebound every call", timed(lm["rebinding"], max(n // 10, 1))),
                ("  its packed entry point, direct", timed(lm["raw"], n)),
                ("empty ctypes call (libc labs)", timed(lambda: libc(1), n))]
        growth = rss_mb() - before
    for name, us in rows:
        print(f"  {name:<42}{us:7.2f} us/call")
    print(f"  target: StoryLM-0 step through the runtime <= 5 us")
    print(f"  RSS growth {growth:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
