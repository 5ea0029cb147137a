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

import build_profile  # noqa: E402
import letgen  # noqa: E402
import timing  # noqa: E402
from build_profile import _llvm_top, _top  # noqa: E402,F401  (tests/test_benchmarks.py reads them here)

TARGET_4000_S = 60.0


# ---- one build in a child process ---------------------------------------------------------
CHILD = r"""
import inspect, json, resource, sys, time
sys.path.insert(0, sys.argv[4])
from compiler import build
timings = {}
nocache = {"cache": False} if "cache" in inspect.signature(build.build_file).parameters else {}
t0 = time.perf_counter()
sizes = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
res = build.build_file(sys.argv[1], sys.argv[2], int(sys.argv[3]), timings, sizes=sizes, **nocache)
wall = time.perf_counter() - t0
if not res.ok:
    build.print_diagnostics(res)
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
rss = max(me.ru_maxrss, kids.ru_maxrss) / 1024
print(json.dumps({"ok": res.ok, "wall": wall, "cpu": cpu, "timings": timings, "rss_mb": rss,
                  "mlir_bytes": len(res.mlir or "")}))
"""


def build_in_child(path: Path, level: int, timeout: float, sizes: dict | None = None,
                   out_dir: Path | None = None) -> dict:
    env = dict(os.environ, KINA_CACHE="0")
    out = (out_dir / path.name if out_dir else path).with_suffix(f".O{level}.so")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, str(path), str(out), str(level), str(ROOT),
                               json.dumps(sizes or {})],
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


# ---- realistic programs ---------------------------------------------------------------------
# The programs of issue 27's build benchmark: the examples (those that build), the GPT block
# (generic: built as `kinac build` builds it, every function for any size, and at one size
# set) and a 4-layer decoder made of examples/decoder_block.kina's block.
GPT = ROOT / "tests" / "programs" / "gpt_block.kina"
GPT_SIZES = {"B": 2, "T": 5, "H": 3, "E": 4, "V": 11}


def decoder_stack(layers: int) -> str:
    """examples/decoder_block.kina's layers, then `decoder` (`layers` blocks, each with its
    own ten weights) and `decoder_grads` (reverseMode: every input's cotangent)."""
    text = (ROOT / "examples" / "decoder_block.kina").read_text()
    head = text[:text.index("// The output and the cotangent")]
    weights = re.search(r"fn block\(x: [^,]+, (.*?)\) -> ", head, re.S)[1]
    params = re.findall(r"(\w+): (Tensor\[\w+, \[[^\]]*\]\])", weights)
    x = "Tensor[F32, [2, 4, 8]]"
    sig = ", ".join([f"x: {x}"] + [f"{n}_{k}: {t}" for k in range(layers) for n, t in params])
    args = ", ".join(["x"] + [f"{n}_{k}" for k in range(layers) for n, _ in params])
    lets = "".join(f"  let h{k + 1} = block(h{k}, " + ", ".join(f"{n}_{k}" for n, _ in params) + ") in\n"
                   for k in range(layers))
    results = ", ".join([x, x] + [t for _ in range(layers) for _, t in params])
    return (head + f"fn decoder({sig}) -> {x} {{\n  let h0 = x in\n{lets}  h{layers}\n}}\n\n"
            f"fn decoder_grads({sig}) -> ({results}) {{\n  handle decoder({args}) with reverseMode\n}}\n")


def realistic_programs(tmp: Path) -> list[tuple[str, Path, dict]]:
    progs = [(p.stem, p, {}) for p in sorted((ROOT / "examples").glob("*.kina")) if not p.stem.startswith("invalid")]
    progs += [("gpt_block (any size)", GPT, {}), ("gpt_block " + ",".join(f"{k}={v}" for k, v in GPT_SIZES.items()),
                                                 GPT, GPT_SIZES)]
    decoder = tmp / "decoder4.kina"
    decoder.write_text(decoder_stack(4))
    return [*progs, ("decoder, 4 layers", decoder, {})]


def realistic(args, tmp: Path) -> None:
    """Build each realistic program at each level; print CPU, wall, stages and CPU per KB of MLIR."""
    print(f"\n{'program':<34}{'level':>6}{'MLIR KB':>9}{'wall s':>8}{'cpu s':>7}{'cpu ms/KB':>10}  stages (s, wall)")
    for name, path, sizes in realistic_programs(tmp):
        for level in args.levels:
            r = build_in_child(path, level, args.timeout, sizes, out_dir=tmp)
            kb = r.get("mlir_bytes", 0) / 1e3
            per_kb = f"{1e3 * r['cpu'] / kb:10.1f}" if kb and "cpu" in r else f"{'-':>10}"
            cpu = f"{r['cpu']:7.2f}" if "cpu" in r else f"{'-':>7}"
            print(f"{name:<34}{'-O' + str(level):>6}{kb:9.0f}{r['wall']:8.2f}{cpu}{per_kb}  {_stages(r)}", flush=True)


def profile(args, tmp: Path) -> int:
    target = args.profile
    if target.isdigit():
        src = tmp / f"chain{target}.kina"
        src.write_text(letgen.let_chain(int(target), args.rows, args.cols, args.seed))
    else:
        src = Path(target).resolve()
    print(f"profile of the -O{args.level} build of {src.name if target.isdigit() else target}")
    if args.level == 0:
        return build_profile.profile_o0(src, tmp, args.top)
    return build_profile.profile_engine(src, args.level, tmp, args.top, args.timeout)

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
    ap.add_argument("--realistic", action="store_true",
                    help="build the examples, the GPT block and a 4-layer decoder (per stage, per KB of MLIR)")
    args = ap.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)   # progress shows in a log
    print(f"machine: {timing.machine_line()}; load average {timing.load():.2f}")
    with tempfile.TemporaryDirectory(prefix="kina-bench-build-") as tmp:
        tmp = Path(tmp)
        if args.profile:
            return profile(args, tmp)
        if args.realistic:
            realistic(args, tmp)
            print(f"load average after: {timing.load():.2f}")
            return 0
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
