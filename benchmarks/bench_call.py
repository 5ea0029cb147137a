"""Per-call overhead of the Python runtime (target: <= 5 us per call of the StoryLM-0 step).

    .venv/bin/python benchmarks/bench_call.py [--calls N]

Times N calls, median of 5 runs, of
- a tiny Kina function (two [2, 3] inputs, one output) built at -O0: with fresh
  outputs (out=None) and with reused out= buffers;
- the StoryLM-0 training step built at -O2: examples/storylm.kina's `train_step`
  at StoryLM-0's sizes (10 inputs, 7 outputs)
    * with reused out= buffers,
    * with fresh outputs,
    * as a functional training loop: every call takes the previous call's fresh
      result arrays as its weights (`loss, *w = step(x, *w, ...)`), so every
      weight is an array the runtime has never seen,
    * through the pure-Python path (load(..., fastcall=False)), out= reused;
  and train_step's packed entry point called directly through ctypes with a
  prebuilt descriptor block (the compute plus one ctypes call: the floor);
- an empty ctypes call (labs from libc), the floor of any Python -> C call.
Every call through the runtime checks every array (compiler.runtime._fastcall, in C).
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

from storylm_data import SIZES, TRAINABLE, attention_scale, causal_mask, corpus_windows, load_weights  # noqa: E402

from compiler import build  # noqa: E402
from compiler.runtime import library as runtime  # noqa: E402

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


def storylm0_inputs(name: str) -> tuple[tuple, tuple]:
    """(arguments before the weights, arguments after them) of a StoryLM-0 step."""
    return (np.ascontiguousarray(corpus_windows()[0]),), (np.full((1, 1), 0.1, np.float32),)


def storylm0_calls(so: Path, name: str) -> dict:
    """The timed calls of one StoryLM-0 step: weights follow the leading arguments
    (emb, then mask and scale, then wq wk wv wo lm_head), results are (loss, *weights)."""
    f = runtime.load(so)[name]
    slow = runtime.load(so, fastcall=False)[name]
    w = load_weights()
    lead, tail = storylm0_inputs(name)
    consts = (causal_mask(), attention_scale())

    def args(weights):
        return (*lead, weights[0], *consts, *weights[1:], *tail)

    weights = [np.array(w[n], np.float32) for n in TRAINABLE]
    out = (np.empty((1, 1), np.float32), *map(np.empty_like, weights))
    fixed = args(weights)
    state = {"w": weights}

    def functional():   # every weight is a fresh array: the previous call's results
        loss, *state["w"] = f(*args(state["w"]))

    return {"out=": lambda: f(*fixed, out=out), "fresh": lambda: f(*fixed), "functional": functional,
            "python": lambda: slow(*fixed, out=out), "raw": direct_call(f, fixed + out)}


def direct_call(f: runtime.KinaFunction, arrays: tuple):
    """The packed entry point of `f` called through ctypes with a block built once."""
    d = f._descriptors
    block = (ctypes.c_int64 * (len(d.template) // 8)).from_buffer_copy(d.template)
    packed = (ctypes.c_void_p * len(arrays))()
    for i, (a, word) in enumerate(zip(arrays, d.words)):
        block[word] = block[word + 1] = a.ctypes.data
        packed[i] = ctypes.addressof(block) + 8 * word
    return lambda block=block: f._packed(packed)    # the lambda keeps the block alive


def build_or_exit(src: Path, so: Path, level: int, sizes: dict | None = None) -> Path:
    res = build.build_file(src, so, level, sizes=sizes)
    if not res.ok:
        build.print_diagnostics(res)
        raise SystemExit(1)
    return res.so_path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=100_000)
    n = ap.parse_args().calls
    print(f"{len(os.sched_getaffinity(0))} cores usable; load average {os.getloadavg()[0]:.2f}; "
          f"median of 5 runs of {n} calls; C fast path {'built' if runtime.FASTCALL_AVAILABLE else 'NOT built'}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src = tmp / "bench.kina"
        src.write_text(SOURCE)
        step = runtime.load(build_or_exit(src, tmp / "bench.so", 0)).step
        a = np.ones((2, 3), np.float32)
        b = np.full((2, 3), 2.0, np.float32)
        out = np.empty((2, 3), np.float32)
        storylm0 = build_or_exit(ROOT / "examples" / "storylm.kina", tmp / "storylm0.so", 2, SIZES)
        steps = {"train_step": storylm0_calls(storylm0, "train_step")}
        libc = ctypes.CDLL(None).labs
        before = rss_mb()
        rows = [("step [2,3] x2, fresh outputs", timed(lambda: step(a, b), n)),
                ("step [2,3] x2, out= reused", timed(lambda: step(a, b, out=out), n))]
        for name, calls in steps.items():
            rows += [(f"StoryLM-0 {name} -O2", None),
                     ("  out= reused", timed(calls["out="], n)),
                     ("  fresh outputs", timed(calls["fresh"], n)),
                     ("  functional loop: fresh weights + outputs", timed(calls["functional"], n)),
                     ("  pure-Python path (no C helper), out=", timed(calls["python"], max(n // 10, 1)))]
        rows += [("train_step packed entry point, direct", timed(steps["train_step"]["raw"], n)),
                 ("empty ctypes call (libc labs)", timed(lambda: libc(1), n))]
        growth = rss_mb() - before
    for name, us in rows:
        print(f"  {name:<46}" + ("" if us is None else f"{us:7.2f} us/call"))
    print("  target: StoryLM-0 step through the runtime <= 5 us")
    print(f"  RSS growth {growth:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
