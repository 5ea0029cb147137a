"""Front-end speed: parse + check of a generated 1,005-line file (67 functions) from
scratch, and the incremental re-check after editing one function body.

    .venv/bin/python benchmarks/bench_frontend.py [--repeats N]

Targets: from scratch <= 150 ms, one-function edit <= 10 ms (medians).
"""
from __future__ import annotations

import argparse
import statistics
import time

from compiler.analysis import Analysis, analyze
from compiler.syntax import parse

FUNCTION = """// layer {i}: a residual block over [4, 4] activations
fn layer{i}(a: Tensor[F32, [4, 4]], b: Tensor[F32, [4, 4]]) -> Tensor[F32, [4, 4]] {{
  let x = a @ b + a in
  let y = x.transpose([1, 0]) * b in
  let z = y.softmax(axis=1) - a / b in
  let w = z.reduce_keep(op=sum, axis=1).broadcast([4, 4]) in
  let s = concat(w.slice(axis=0, start=0, stop=2), a.slice(axis=0, start=2, stop=4), axis=0) in
  let t = -s.exp() + Tensor[F32, [4, 4]] {{ 0.5 }} in
  let u = {callee}(t, b) in
  let v = (u @ t).tanh() in
  let q = v + w in
  let r = q.reshape([16]).reshape([4, 4]) in
  r
}}
"""


def generate(n: int = 67) -> str:   # 67 x 15 lines = 1,005 lines
    parts = []
    for i in range(n):
        callee = f"layer{i - 1}" if i else "concat_first"
        parts.append(FUNCTION.format(i=i, callee=callee).replace("concat_first(t, b)", "t"))
    return "\n".join(parts)


def median_ms(fn, repeats: int) -> tuple[float, float]:
    """Median wall-clock and CPU milliseconds (CPU time is the steadier figure on a busy machine)."""
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - w0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    text = generate()
    lines = text.count("\n") + 1

    def scratch():
        parse.parse_local.cache_clear()   # a true cold start: no parsed item is reused
        snap = analyze(text)
        assert not snap.diagnostics, snap.diagnostics[:3]

    cold = median_ms(scratch, args.repeats)

    # Edit the body of a function in the middle (its length changes, so every later item moves).
    a = Analysis()
    a.update(text)
    target = "let r = q.reshape([16]).reshape([4, 4]) in"
    middle = text.index(target, len(text) // 2)
    variants = [text[:middle] + target.replace("[16]", f"[{16}]" + " " * k) + text[middle + len(target):]
                for k in range(1, 3)]
    state = {"i": 0}

    def edit():
        state["i"] += 1
        snap = a.update(variants[state["i"] % 2])
        assert not snap.diagnostics

    warm = median_ms(edit, args.repeats)
    print(f"file: {lines} lines, {text.count('fn layer')} functions, {len(text)} characters")
    print(f"parse + check from scratch:   wall {cold[0]:7.1f} ms  cpu {cold[1]:7.1f} ms  (target <= 150 ms)")
    print(f"re-check after one body edit: wall {warm[0]:7.1f} ms  cpu {warm[1]:7.1f} ms  (target <= 10 ms)")


if __name__ == "__main__":
    main()
