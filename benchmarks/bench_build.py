"""Build time against program size: N-let functions, a large splat literal, and a profile of one build.

    .venv/bin/python benchmarks/bench_build.py [--lets 250 500 1000 2000 4000] [--levels 0 2]
                                               [--timeout 600] [--rows 8 --cols 16] [--splat 10000]
    .venv/bin/python benchmarks/bench_build.py --profile 1000 [--level 2]     # where one build's time goes
    .venv/bin/python benchmarks/bench_build.py --profile path/to/file.kina

The curve: for each N, benchmarks/letgen.py writes a function of N lets over [R, C]
tensors (seeded: the same text every run), and each level builds it in a child
process (`kinac build`'s build_file, no build cache) killed after --timeout seconds.
It prints the wall time, the CPU time (the child and the tools it runs: on a loaded
machine the steadier figure), the stages (wall), the peak RSS, and the growth exponent
k of cpu ~ N^k between consecutive sizes (1 = linear, 2 = quadratic).  The splat row
builds `x + Tensor[F32, [S, S]]{1.5}` (a constant of S*S equal elements).

--profile builds one program in a child process with MLIR's pass timing on (the
-O2 pass pipeline's report, top passes by wall time) and kernel merging
(compiler/backend/llvm_stage.py), then LLVM's part as the build runs it: `mlir-translate`,
`opt -O2 -time-passes` and `llc -O2 -time-passes` (their top passes), so the stage
that dominates is named, not guessed.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

import letgen  # noqa: E402
import timing  # noqa: E402

TARGET_4000_S = 60.0


# ---- one build in a child process ---------------------------------------------------------
CHILD = r"""
import inspect, json, resource, sys, time
sys.path.insert(0, sys.argv[4])
from compiler import build
timings = {}
nocache = {"cache": False} if "cache" in inspect.signature(build.build_file).parameters else {}
t0 = time.perf_counter()
res = build.build_file(sys.argv[1], sys.argv[2], int(sys.argv[3]), timings, **nocache)
wall = time.perf_counter() - t0
if not res.ok:
    build.print_diagnostics(res)
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
rss = max(me.ru_maxrss, kids.ru_maxrss) / 1024
print(json.dumps({"ok": res.ok, "wall": wall, "cpu": cpu, "timings": timings, "rss_mb": rss}))
"""


def build_in_child(path: Path, level: int, timeout: float) -> dict:
    env = dict(os.environ, KINA_CACHE="0")
    out = path.with_suffix(f".O{level}.so")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, str(path), str(out), str(level), str(ROOT)],
                              capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "wall": time.perf_counter() - t0, "error": f"timed out after {timeout:.0f} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines:
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return {"ok": False, "wall": time.perf_counter() - t0, "error": f"exit {proc.returncode}: {tail}"}
    result = json.loads(lines[-1])
    if not result["ok"]:
        result["error"] = (proc.stderr.strip().splitlines() or ["build failed"])[0]
    return result


def _stages(r: dict) -> str:
    if not r.get("timings"):
        return r.get("error", "")
    return ", ".join(f"{k} {v:.2f}" for k, v in r["timings"].items() if v >= 0.01)


def curve(args, tmp: Path) -> dict:
    print(f"\n{'lets':>6}{'level':>7}{'wall s':>9}{'cpu s':>8}{'k':>7}{'RSS MB':>9}  stages (s, wall)")
    results: dict = {}
    for level in args.levels:
        prev = None
        for n in args.lets:
            src = tmp / f"chain{n}.kina"
            src.write_text(letgen.let_chain(n, args.rows, args.cols, args.seed))
            r = build_in_child(src, level, args.timeout)
            results[n, level] = r
            k = ""
            if prev and r["ok"] and prev[1]["ok"]:
                k = f"{math.log(r['cpu'] / prev[1]['cpu']) / math.log(n / prev[0]):.2f}"
            rss = f"{r['rss_mb']:.0f}" if "rss_mb" in r else "-"
            cpu = f"{r['cpu']:.2f}" if "cpu" in r else "-"
            wall = f"{r['wall']:.2f}" + ("" if r["ok"] else "!")
            print(f"{n:>6}{'-O' + str(level):>7}{wall:>9}{cpu:>8}{k:>7}{rss:>9}  {_stages(r)}", flush=True)
            prev = (n, r)
            if not r["ok"] and "timed out" in r.get("error", ""):
                print(f"{'':>6}{'':>7}  (larger sizes at -O{level} skipped)")
                break
    return results


def splat(args, tmp: Path) -> None:
    s = args.splat
    t = f"Tensor[F32, [{s}, {s}]]"
    src = tmp / f"splat{s}.kina"
    src.write_text(f"fn big(x: {t}) -> {t} {{\n  let c = {t}{{1.5}} in\n  let y = x + c in\n  y\n}}\n")
    print(f"\nsplat literal {t}{{1.5}} + x:")
    for level in args.levels:
        r = build_in_child(src, level, args.timeout)
        cpu = f", cpu {r['cpu']:.2f} s" if "cpu" in r else ""
        print(f"  -O{level}: {r['wall']:.2f} s{cpu}{'' if r['ok'] else ' (failed)'}  {_stages(r)}", flush=True)


# ---- a profile of one build ---------------------------------------------------------------------
def _top(report: str, n: int) -> list[str]:
    """The n largest rows of an MLIR/LLVM timing report (lines with a seconds figure and a name)."""
    rows = []
    for line in report.splitlines():
        m = re.match(r"\s*([0-9.]+)\s+\(\s*([0-9.]+)%\)\s+(.*\S)\s*$", line)
        if m and m[3] not in ("Total", "Rest"):
            rows.append((float(m[1]), f"{float(m[1]):8.3f} s {float(m[2]):5.1f}%  {m[3].strip()}"))
    return [r for _, r in sorted(rows, reverse=True)[:n]]


def _llvm_top(report: str, n: int) -> list[str]:
    """Top n passes of the "Pass execution timing report" of LLVM's -time-passes (wall time
    column); its other reports (instruction selection, analyses) time parts of passes."""
    sections = re.split(r"\n(?=\s*===-+===\s*\n.*\n\s*===-+===)", report)
    passes = next((sec for sec in sections if "Pass execution timing report" in sec), "")
    rows = []
    for line in passes.splitlines():
        nums = re.findall(r"([0-9.]+) \(\s*([0-9.]+)%\)", line)
        if len(nums) >= 2:
            name = re.split(r"\)\s+", line.strip())[-1]
            wall = float(nums[-1][0])
            if name != "Total":
                rows.append((wall, f"{wall:8.3f} s {float(nums[-1][1]):5.1f}%  {name}"))
    return [r for _, r in sorted(rows, reverse=True)[:n]]


PROFILE_CHILD = r"""
import resource, sys, time
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from compiler import build, engine, llvm_stage, pipelines
from compiler.core.diagnostics import SourceText
path, level, work = sys.argv[1], int(sys.argv[2]), Path(sys.argv[4])
text = Path(path).read_text()
res = build.BuildResult(False, source=SourceText(text, path))
fe = {}
mlir = build.front_end(text, path, fe, res)
print("front end: " + ", ".join(f"{k} {v:.3f} s" for k, v in fe.items()), flush=True)
passes = pipelines.passes_for(mlir, level, work)
ir, passmanager, _ = engine.engine_module()
with ir.Context() as ctx:
    ctx.enable_multithreading(False)
    module = ir.Module.parse(mlir)
    t0 = time.perf_counter()
    engine.prepare_for_script(ir, module, passes)
    print(f"rewrites before the pipeline: {time.perf_counter() - t0:.3f} s", flush=True)
    t0 = time.perf_counter()
    engine.run_pipeline(ir, passmanager, module, passes, mlir, enable_timing=True)
    print(f"MLIR passes: {time.perf_counter() - t0:.3f} s", flush=True)
    engine._append_packed(ir, module, mlir)
    t0 = time.perf_counter()
    merged = llvm_stage.dedupe_kernels(ir, module)
    lowered = str(module)
    n_funcs = sum(1 for op in module.body.operations if op.operation.name == "llvm.func")
    print(f"kernel merging: {time.perf_counter() - t0:.3f} s ({merged} merged); lowered module: "
          f"{len(lowered) / 1e6:.1f} MB of text, {n_funcs} llvm.func", flush=True)
(work / "lowered.mlir").write_text(lowered)
ru = resource.getrusage(resource.RUSAGE_SELF)
print(f"CPU time of the in-process part: user {ru.ru_utime:.2f} s, system {ru.ru_stime:.2f} s", flush=True)
"""


def profile(args, tmp: Path) -> int:
    target = args.profile
    if target.isdigit():
        src = tmp / f"chain{target}.kina"
        src.write_text(letgen.let_chain(int(target), args.rows, args.cols, args.seed))
    else:
        src = Path(target)
    print(f"profile of the -O{args.level} build of {src.name if target.isdigit() else src}")
    proc = subprocess.run([sys.executable, "-c", PROFILE_CHILD, str(src), str(args.level), str(ROOT), str(tmp)],
                          capture_output=True, text=True, timeout=args.timeout)
    print(proc.stdout.rstrip())
    if proc.returncode:
        print(proc.stderr[-2000:])
        return 1
    print("top MLIR passes (wall):")
    print("\n".join("  " + r for r in _top(proc.stderr, args.top)))
    return llvm_profile(tmp, args.top)


def llvm_profile(tmp: Path, top: int) -> int:
    from compiler.backend import toolchain
    from compiler.backend.llvm_stage import host_target
    llvm_bin = toolchain.find_tool("llc").parent
    translate = toolchain.find_tool("mlir-translate")
    ll, opt_ll = tmp / "lowered.ll", tmp / "opt.ll"
    steps = [("mlir-translate", [str(translate), "--mlir-to-llvmir", str(tmp / "lowered.mlir"), "-o", str(ll)]),
             ("opt -O2", [str(llvm_bin / "opt"), "-O2", *host_target(), "-time-passes", "-S", str(ll),
                          "-o", str(opt_ll)]),
             ("llc -O2", [str(llvm_bin / "llc"), "-O2", *host_target(), "-time-passes", "-filetype=obj",
                          "-relocation-model=pic", str(opt_ll), "-o", str(tmp / "llc.o")])]
    for name, cmd in steps:
        if not Path(cmd[0]).exists():
            print(f"{name}: {cmd[0]} not found; LLVM pass profile skipped")
            return 0
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode:
            print(f"{name} failed: {proc.stderr[-1000:]}")
            return 1
        print(f"{name}: {wall:.2f} s" + (f"; size {ll.stat().st_size / 1e6:.1f} MB of LLVM IR" if name == "mlir-translate" else ""))
        if "-time-passes" in cmd:
            print("\n".join("  " + r for r in _llvm_top(proc.stderr, top)))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lets", type=int, nargs="+", default=[250, 500, 1000, 2000, 4000])
    ap.add_argument("--levels", type=int, nargs="+", default=[0, 2])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--cols", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds before one build is killed")
    ap.add_argument("--splat", type=int, default=10000, help="side of the splat literal (0: skip)")
    ap.add_argument("--profile", help="profile one build: a let count (letgen) or a .kina file")
    ap.add_argument("--level", type=int, default=2, help="the level of --profile")
    ap.add_argument("--top", type=int, default=12, help="rows of each profile report")
    args = ap.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)   # progress shows in a log
    print(f"machine: {timing.machine_line()}; load average {timing.load():.2f}")
    with tempfile.TemporaryDirectory(prefix="kina-bench-build-") as tmp:
        tmp = Path(tmp)
        if args.profile:
            return profile(args, tmp)
        results = curve(args, tmp)
        if args.splat:
            splat(args, tmp)
    for level in args.levels:
        r = results.get((4000, level))
        if r is not None:
            ok = r["ok"] and r["wall"] < TARGET_4000_S
            print(f"target: 4,000-let function at -O{level} builds in < {TARGET_4000_S:.0f} s: "
                  f"{r['wall']:.1f} s{'' if r['ok'] else ' (' + r.get('error', 'failed') + ')'} "
                  f"({'met' if ok else 'NOT met'})")
    print(f"load average after: {timing.load():.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
