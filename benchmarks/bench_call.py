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
- an empty ctypes call (labs from libc), the floor of any Python -> C call;
- static vs dynamic (issue 25): the same hand-written C function exported both ways from one
  library (no compiler involved: `add[M, N]`, 2 inputs and 1 output, and `many[M, N]`, 10
  inputs and 7 outputs like the StoryLM-0 step, all [2, 3]); the dynamic call binds M and N
  from the shapes on its first call and then reuses the prepared call (a dict lookup by
  shapes): target within 2x of the static call at repeated shapes.  When the compiler
  exports the generic StoryLM source dynamically (built with no --size), its train_step is
  timed the same way against the static build.
- torch tensors (issue 28, when torch is importable): the same calls with torch.Tensor
  arguments and out= buffers (the C fast path reads each through torch's DLPack C exchange
  API: compiler/runtime/_dlpack.h), fresh results returned as torch tensors (like=: allocated
  in C and made tensors through that API, compiler/runtime/_results.h), each against the
  NumPy row (target: within 1.5x).  The two rows of a pair are timed in
  alternating runs and in CPU time (the machine may be loaded: their ratio is the figure).
Every call through the runtime checks every array (compiler.runtime._fastcall, in C).
Also reports RSS growth over the runs (the runtime keeps no array alive)."""
import argparse
import ctypes
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

try:   # optional: the torch-tensor rows (imported before the RSS baseline)
    import torch
except ImportError:
    torch = None

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from storylm_data import SIZES, TRAINABLE, attention_scale, causal_mask, corpus_windows, load_weights  # noqa: E402

from compiler import build  # noqa: E402
from compiler.runtime import library as runtime  # noqa: E402
from compiler.runtime.loader import MANIFEST_FORMAT  # noqa: E402

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

    return {"f": f, "out=": lambda: f(*fixed, out=out), "fresh": lambda: f(*fixed), "functional": functional,
            "python": lambda: slow(*fixed, out=out), "raw": direct_call(f, fixed + out), "fixed": fixed, "out": out}


def direct_call(f: runtime.KinaFunction, arrays: tuple):
    """The packed entry point of `f` called through ctypes with a block built once."""
    d = f._descriptors
    block = (ctypes.c_int64 * (len(d.template) // 8)).from_buffer_copy(d.template)
    packed = (ctypes.c_void_p * len(arrays))()
    for i, (a, word) in enumerate(zip(arrays, d.words)):
        block[word] = block[word + 1] = a.ctypes.data
        packed[i] = ctypes.addressof(block) + 8 * word
    return lambda block=block: f._packed(packed)    # the lambda keeps the block alive


# ---- static vs dynamic: one hand-written C library exporting each function both ways --------
def _c_function(name: str, n_in: int, n_out: int, dynamic: bool) -> str:
    """out_k = in_0 + in_1 over [M, N]; the static entry checks [2, 3], the dynamic one the sizes block."""
    n = n_in + n_out
    if dynamic:
        check = (f"const int64_t *s = (const int64_t *)args[{n}]; int64_t M = s[0], N = s[1];"
                 f" if (M < 1) return {2 + n}; if (N < 1) return {3 + n};")
    else:
        check = "int64_t M = 2, N = 3;"
    return f"""
void _mlir_ciface_kina_{name}(void) {{}}
int32_t _kina_packed_kina_{name}(void **args) {{
    {check}
    for (int i = 0; i < {n}; i++)
        if (((int64_t *)args[i])[3] != M || ((int64_t *)args[i])[4] != N) return 2 + i;
    const float *a = (const float *)(intptr_t)((int64_t *)args[0])[1];
    const float *b = (const float *)(intptr_t)((int64_t *)args[1])[1];
    for (int k = {n_in}; k < {n}; k++) {{
        float *o = (float *)(intptr_t)((int64_t *)args[k])[1];
        for (int64_t x = 0; x < M * N; x++) o[x] = a[x] + b[x];
    }}
    return 0;
}}"""


def static_vs_dynamic_library(tmp: Path) -> Path | None:
    """The C library and its format-3 manifest: add / add_dyn, many / many_dyn."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    shapes = {False: [2, 3], True: ["M", "N"]}
    abi, functions, code = [], [], ["#include <stdint.h>"]
    for base, n_in, n_out in (("add", 2, 1), ("many", 10, 7)):
        for dynamic in (False, True):
            name = base + ("_dyn" if dynamic else "")
            dims = ",".join(map(str, shapes[dynamic]))
            abi.append(f"kina_{name}{'[M,N]' if dynamic else ''}({', '.join([f'f32[{dims}]'] * n_in)}) -> "
                       f"({', '.join([f'f32[{dims}]'] * n_out)})")
            functions.append({"name": name, "symbol": f"_mlir_ciface_kina_{name}", "sizes": ["M", "N"] if dynamic else [],
                              "params": [{"name": f"x{i}", "dtype": "F32", "shape": shapes[dynamic]} for i in range(n_in)],
                              "results": [{"dtype": "F32", "shape": shapes[dynamic]}] * n_out})
            code.append(_c_function(name, n_in, n_out, dynamic))
    abi_text = "\\n".join(abi)
    code += ['const char *_kina_abi(void) { return "' + abi_text + '"; }',
             "const char *_kina_last_error(void) { return 0; }"]
    (tmp / "sd.c").write_text("\n".join(code))
    so = tmp / "sd.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(so), str(tmp / "sd.c")], check=True)
    (tmp / "sd.json").write_text(json.dumps({"format": MANIFEST_FORMAT,
                                             "library_sha256": hashlib.sha256(so.read_bytes()).hexdigest(),
                                             "functions": functions}))
    return so


def static_vs_dynamic_rows(tmp: Path, n: int) -> list:
    so = static_vs_dynamic_library(tmp)
    if so is None:
        return [("static vs dynamic: no C compiler, skipped", None)]
    lib = runtime.load(so)
    rows = [("static vs dynamic (hand-written C, [2, 3] arrays)", None)]
    for base, n_in, n_out in (("add", 2, 1), ("many", 10, 7)):
        args = tuple(np.full((2, 3), i, np.float32) for i in range(n_in))
        out = tuple(np.empty((2, 3), np.float32) for _ in range(n_out))
        for label, kw in (("fresh outputs", {}), ("out= reused", {"out": out})):
            t_static = timed(lambda f=lib[base], a=args, k=kw: f(*a, **k), n)
            t_dynamic = timed(lambda f=lib[base + "_dyn"], a=args, k=kw: f(*a, **k), n)
            rows += [(f"  {base} ({n_in} in, {n_out} out), {label}: static", t_static),
                     (f"  {base} ({n_in} in, {n_out} out), {label}: dynamic", t_dynamic),
                     (f"    dynamic / static = {t_dynamic / t_static:.2f}x (target <= 2x)", None)]
    # shapes that change at every call: each call misses the previous call's shapes and
    # finds its prepared call in the cache (by the tuple of shapes)
    f = lib["many_dyn"]
    pairs = [(tuple(np.ones((m, 3), np.float32) for _ in range(10)),
              tuple(np.empty((m, 3), np.float32) for _ in range(7))) for m in (2, 3)]
    state = {"i": 0}

    def alternate():
        a, o = pairs[state["i"] & 1]
        state["i"] += 1
        f(*a, out=o)
    rows.append(("  many, out= reused, M alternating 2, 3, 2, ...: dynamic", timed(alternate, n)))
    return rows


def storylm_dynamic_rows(tmp: Path, static_so: Path, n: int) -> list:
    """train_step of the generic StoryLM source built with no --size (dynamic: the sizes
    read from the arrays at each call, H given as a keyword) against the static build."""
    res = build.build_file(ROOT / "examples" / "storylm.kina", tmp / "storylm_dyn.so", 2)
    if not res.ok:
        build.print_diagnostics(res)
        raise SystemExit("the dynamic StoryLM build failed")
    dyn = runtime.load(res.so_path).train_step
    assert isinstance(dyn, runtime.DynamicKinaFunction)
    static = storylm0_calls(static_so, "train_step")
    fixed_args = static["fixed"]
    t_static = timed(static["out="], n)
    t_dyn = timed(lambda: dyn(*fixed_args, out=static["out"], H=2), n)
    return [("StoryLM-0 train_step -O2, out= reused: static", t_static),
            ("StoryLM-0 train_step -O2, out= reused: dynamic", t_dyn),
            (f"  dynamic / static = {t_dyn / t_static:.2f}x (the whole step: the dynamic code's own speed "
             "at these tiny sizes, not the call overhead the rows above measure)", None)]


def timed_pair(f, g, n: int, runs: int = 5) -> tuple[float, float]:
    """Median CPU microseconds per call of f and of g, over `runs` alternating runs of n calls
    each (CPU time and alternation keep the ratio meaningful when other processes run)."""
    f(), g()
    samples: tuple[list, list] = ([], [])
    for _ in range(runs):
        for fn, out in ((f, samples[0]), (g, samples[1])):
            t0 = time.process_time()
            for _ in range(n):
                fn()
            out.append((time.process_time() - t0) / n * 1e6)
    return statistics.median(samples[0]), statistics.median(samples[1])


def torch_rows(step, a, b, out, storylm: dict, n: int) -> list:
    """The NumPy calls above again with torch tensors (compiler/runtime/dlpack.py)."""
    if torch is None:
        return [("torch tensors: torch not installed, skipped", None)]
    ta, tb, tout = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(out.copy())
    fixed = tuple(torch.from_numpy(x) for x in storylm["fixed"])
    outs = tuple(torch.from_numpy(x.copy()) for x in storylm["out"])
    f = storylm["f"]
    pairs = [("step [2,3] x2, fresh outputs", lambda: step(a, b), lambda: step(ta, tb, like=ta)),
             ("step [2,3] x2, out= reused", lambda: step(a, b, out=out), lambda: step(ta, tb, out=tout)),
             ("StoryLM-0 train_step, out= reused", storylm["out="], lambda: f(*fixed, out=outs)),
             ("StoryLM-0 train_step, fresh outputs", storylm["fresh"], lambda: f(*fixed, like="torch"))]
    rows = [("torch tensors in, torch tensors out (DLPack, in C) vs NumPy, CPU time", None)]
    for label, numpy_call, torch_call in pairs:
        t_np, t_torch = timed_pair(numpy_call, torch_call, n)
        rows += [(f"  {label}: NumPy", t_np), (f"  {label}: torch", t_torch),
                 (f"    torch / NumPy = {t_torch / t_np:.2f}x (target <= 1.5x)", None)]
    return rows


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
        rows += torch_rows(step, a, b, out, steps["train_step"], n)
        rows += static_vs_dynamic_rows(tmp, n)
        rows += storylm_dynamic_rows(tmp, storylm0, n)
        growth = rss_mb() - before
    for name, us in rows:
        print(f"  {name:<58}" + ("" if us is None else f"{us:7.2f} us/call"))
    print("  target: StoryLM-0 step through the runtime <= 5 us")
    print(f"  RSS growth {growth:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
