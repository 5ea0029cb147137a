"""Where a compiled step's time goes: wall time per emitted kernel (one row per linalg op).

    .venv/bin/python benchmarks/profile_kernels.py [FILE.kina] [--fn train_step] [-O 2] [--calls 50]
    .venv/bin/python benchmarks/profile_kernels.py          # the scaled StoryLM train step (bench_scaled's sizes)
    .venv/bin/python benchmarks/profile_kernels.py --config large   # bench_scaled's large sizes

How: the emitted MLIR (tensor level, before any pass) gets a call
`kina_prof_tick(id)` before every op of every function body and `kina_prof_tick(-1)`
before each return; the library is then built as usual (the -O2 pipeline, tiling,
threading and all) and linked against a small C library that defines the tick and
adds the CLOCK_MONOTONIC time between one tick and the next to the op that started
it.  So a row's time is the wall time of one emitted op: a linalg.matmul with its
fill, a softmax's four generics as four rows, a parallel loop as the wall time of
the whole loop.  Rows are named by their MLIR op, result type and Kina source line
(AD-built ops carry the span of the forward op they differentiate; the function name
tells forward from backward).

The instrumented step is compared with the same step built without ticks: the
overhead (a few microseconds for ~200 ticks) is printed.  Pure ops could in
principle be moved across the opaque calls by LLVM; the instrumented total matching
the plain step is the check that they were not.
"""
from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

import scaled_model as M  # noqa: E402
import timing  # noqa: E402

from compiler import build  # noqa: E402
from compiler.backend import engine, rewrites, toolchain  # noqa: E402
from compiler.backend import errors as toolchain_errors  # noqa: E402
from compiler.core.diagnostics import SourceText  # noqa: E402
from compiler.oracle import interp  # noqa: E402
from compiler.runtime import library as runtime  # noqa: E402

MAX_TICKS = 1 << 16
TICK_C = r"""
#include <stdint.h>
#include <time.h>
#define N {n}
uint64_t kina_prof_ns[N], kina_prof_calls[N];
static int64_t last_id = -1;
static uint64_t last;
static inline uint64_t now(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
void kina_prof_tick(int64_t id) {
  uint64_t t = now();
  if (last_id >= 0) { kina_prof_ns[last_id] += t - last; kina_prof_calls[last_id]++; }
  last_id = id < N ? id : -1;
  last = now();
}
void kina_prof_reset(void) {
  for (int i = 0; i < N; i++) kina_prof_ns[i] = kina_prof_calls[i] = 0;
  last_id = -1;
}
""".replace("{n}", str(MAX_TICKS))
SKIP = {"arith.constant", "tensor.empty", "func.return", "tensor.expand_shape", "tensor.collapse_shape",
        "tensor.cast", "tensor.extract_slice"}   # no work of their own (views, constants)


def tick_library(tmp: Path):
    src, so = tmp / "kina_prof.c", tmp / "libkina_prof.so"
    src.write_text(TICK_C)
    subprocess.run([toolchain.find_tool("cc"), "-O2", "-shared", "-fPIC", str(src), "-o", str(so)], check=True)
    return ctypes.CDLL(str(so), mode=ctypes.RTLD_GLOBAL), so


def _kind(ir, op) -> str:
    name = op.name
    if name == "linalg.generic":
        its = [str(i).rsplit("<", 1)[-1].rstrip(">") for i in ir.ArrayAttr(op.attributes["iterator_types"])]
        if rewrites._scatter_shape(ir, op) is not None:
            return "scatter (generic)"
        return "reduction" if "reduction" in its else "elementwise"
    return {"linalg.matmul": "matmul", "linalg.batch_matmul": "matmul", "linalg.transpose": "transpose",
            "linalg.fill": "fill", "linalg.copy": "copy", "tensor.insert_slice": "copy"}.get(name, name)


def instrument(mlir: str) -> tuple[str, list[dict]]:
    """The module with a tick before each op; returns (text, one record per tick id)."""
    ir, _, _ = engine.engine_module()
    records: list[dict] = []
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(mlir)
        i64 = ir.IntegerType.get_signless(64)
        for fn in list(module.body.operations):
            if fn.operation.name != "func.func":
                continue
            fname = ir.StringAttr(fn.attributes["sym_name"]).value
            for op in list(fn.regions[0].blocks[0].operations):
                name = op.operation.name
                if name in SKIP and name != "func.return":
                    continue
                tick = -1
                if name != "func.return":
                    tick = len(records)
                    out = op.results[0].type if len(op.results) else None
                    records.append({"op": name, "kind": _kind(ir, op.operation), "fn": fname,
                                    "loc": str(op.location), "type": str(out) if out is not None else "",
                                    "text": op.operation.get_asm(enable_debug_info=False)})
                with ir.InsertionPoint(op), op.location:
                    c = ir.Operation.create("arith.constant", results=[i64],
                                            attributes={"value": ir.IntegerAttr.get(i64, tick)})
                    ir.Operation.create("func.call", operands=[c.results[0]],
                                        attributes={"callee": ir.FlatSymbolRefAttr.get("kina_prof_tick")})
        decl = ir.Module.parse("func.func private @kina_prof_tick(i64)")
        module.body.append(decl.body.operations[0].detach_from_parent())
        # The exports' ABI lives in `// kina-abi:` comments, which parsing drops: keep them.
        abi = "".join(line + "\n" for line in mlir.splitlines() if line.lstrip().startswith("// kina-abi:"))
        return abi + module.operation.get_asm(enable_debug_info=True), records


def _source_line(source: SourceText, loc: str) -> str:
    m = toolchain_errors.INLINE_LOC_RE.search(loc)
    if not m:
        return "?"
    line = int(m["line"])
    text = source.text.splitlines()[line - 1].strip() if line <= len(source.text.splitlines()) else ""
    return f"{line}: {text[:60]}"


def front(path: Path, sizes: dict | None = None, fn: str | None = None) -> tuple[str, build.BuildResult]:
    """The MLIR of `path` (with `sizes`: its generic functions at those sizes, only `fn`'s code)."""
    text = path.read_text()
    res = build.BuildResult(False, source=SourceText(text, str(path)))
    keep = build.keep_exports([fn]) if sizes and fn else None
    mlir = build.front_end(text, str(path), {}, res, keep, sizes)
    if mlir is None:
        build.print_diagnostics(res)
        raise SystemExit(f"{path}: front end failed")
    return mlir, res


def load_compiled(mlir: str, res: build.BuildResult, so: Path, level: int, link_with: tuple = ()):
    compiled = toolchain.compile_mlir(mlir, so, opt_level=level, source=res.source, link_with=link_with)
    if not compiled.ok:
        for d in compiled.diagnostics:
            print(res.source.render(d))
        raise SystemExit("build failed")
    build.write_artifacts(res.program, so)
    return runtime.load(so)


def inputs_for(res: build.BuildResult, fn: str, config: str | None) -> list[np.ndarray]:
    f = res.program.functions[fn]
    if config and fn == "train_step":
        w = M.make_inputs(M.sizes(*M.CONFIGS[config]))
        return [w[p.name] for p in f.params]
    return interp.random_inputs(f, seed=0, program=res.program)


def _first(result) -> np.ndarray:
    return np.asarray(result[0] if isinstance(result, tuple) else result)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", help="a .kina file (default: the scaled StoryLM)")
    ap.add_argument("--fn", default="train_step")
    ap.add_argument("-O", dest="level", type=int, default=2)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--show", type=int, default=0, help="print the MLIR of the N slowest ops")
    ap.add_argument("--config", choices=sorted(M.CONFIGS), default="scaled",
                    help="the StoryLM sizes, without a file (bench_scaled.py's configs)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kina-prof-") as tmp:
        tmp = Path(tmp)
        path = Path(args.file) if args.file else M.STORYLM
        config = None if args.file else args.config
        sizes = M.kina_sizes(M.sizes(*M.CONFIGS[config])) if config else None
        mlir, res = front(path, sizes, args.fn)
        prof, prof_so = tick_library(tmp)
        plain = load_compiled(mlir, res, tmp / "plain.so", args.level)
        text, records = instrument(mlir)
        lib = load_compiled(text, res, tmp / "ticked.so", args.level, (prof_so,))
        xs = inputs_for(res, args.fn, config)
        f_plain, f_ticked = plain[args.fn], lib[args.fn]
        np.testing.assert_allclose(_first(f_ticked(*xs)), _first(f_plain(*xs)), rtol=1e-5, atol=1e-6)
        t = timing.interleaved({"plain": lambda: f_plain(*xs), "ticked": lambda: f_ticked(*xs)}, 5, 0.3)
        prof.kina_prof_reset()
        for _ in range(args.calls):
            f_ticked(*xs)
        ns = (ctypes.c_uint64 * MAX_TICKS).in_dll(prof, "kina_prof_ns")
        per_call = [ns[i] / args.calls / 1e6 for i in range(len(records))]
    report(path, res, records, per_call, t, args)
    return 0


def report(path, res, records, per_call, t, args) -> None:
    total = sum(per_call)
    print(f"{path.name} `{args.fn}` at -O{args.level}: {len(records)} kernels; step {t['plain'] * 1e3:.2f} ms "
          f"plain, {t['ticked'] * 1e3:.2f} ms instrumented (median of 5 interleaved rounds), "
          f"{total:.2f} ms inside kernels ({args.calls} calls); load {timing.load():.2f}")
    by_kind: dict[str, float] = defaultdict(float)
    for r, ms in zip(records, per_call):
        by_kind[r["kind"]] += ms
    print("by kind:  " + ", ".join(f"{k} {v:.2f} ms ({v / total:.0%})"
                                    for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])))
    print(f"{'ms':>7} {'%':>5}  {'kind':<18}{'result type':<34}{'function':<22}Kina line")
    order = sorted(range(len(records)), key=lambda i: -per_call[i])
    for i in order[:args.top]:
        r = records[i]
        print(f"{per_call[i]:7.3f} {per_call[i] / total:5.1%}  {r['kind']:<18}{r['type'][:33]:<34}"
              f"{r['fn'][:21]:<22}{_source_line(res.source, r['loc'])}")
    for i in order[:args.show]:
        print(f"\n--- {per_call[i]:.3f} ms, {records[i]['kind']} in {records[i]['fn']}:\n{records[i]['text']}")


if __name__ == "__main__":
    sys.exit(main())
