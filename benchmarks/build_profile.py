"""Where one build's time goes (bench_build.py --profile): per stage in CPU seconds, and per pass.

-O0 runs the build's own `toolchain.compile_mlir` with every tool process timed (its CPU time
from getrusage) and asked for its pass report: mlir-opt's `--mlir-timing` (passes summed over
the build's mlir-opt processes, by name) and llc's `-time-passes`.  -O1..-O3 run the engine's
pass pipeline in a child process with MLIR's pass timing on, then LLVM's part as the build
runs it (mlir-translate in the engine, `opt` and `llc` with the build's flags, on the whole
module: a build of a module over llvm_stage.SPLIT_MIN_BYTES runs two halves side by side).
"""
from __future__ import annotations

import importlib
import re
import resource
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


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


def mlir_pass_totals(reports: list[str]) -> dict[str, float]:
    """Seconds per pass name over several `--mlir-timing` reports (top-level rows only)."""
    totals: dict[str, float] = defaultdict(float)
    for report in reports:
        for line in report.splitlines():
            m = re.match(r"\s*([0-9.]+)\s+\(\s*[0-9.]+%\)(\s+)(.*\S)\s*$", line)
            if m and m[3] not in ("Total", "Rest") and len(m[2]) <= 2:   # nested rows are indented more
                totals[m[3]] += float(m[1])
    return dict(totals)


def front(path: Path) -> tuple[str, dict[str, float]]:
    """The emitted MLIR of a file and the front end's stages (CPU seconds of this process)."""
    from compiler import build
    from compiler.core.diagnostics import SourceText
    text = path.read_text()
    res = build.BuildResult(False, source=SourceText(text, str(path)))
    wall: dict[str, float] = {}
    c0 = time.process_time()
    mlir = build.front_end(text, str(path), wall, res)
    if mlir is None:
        raise SystemExit(f"{path}: the front end reported errors")
    scale = (time.process_time() - c0) / max(sum(wall.values()), 1e-9)   # wall -> CPU, pro rata
    return mlir, {k: v * scale for k, v in wall.items()}


def profile_o0(path: Path, work: Path, top: int) -> int:
    """The -O0 build of `path` (its tools timed and asked for their pass reports)."""
    from compiler.backend import toolchain
    mlir, stages = front(path)
    reports: dict[str, list[str]] = defaultdict(list)
    # mlir-opt runs from compiler/backend/mlir_opt.py (toolchain.py in older trees), the others from toolchain.py
    try:
        from compiler.backend import mlir_opt as passes_module
    except ImportError:
        passes_module = toolchain
    # ... mlir-translate and llc from llvm_stage.py, the parts' link from parts.py (newer trees)
    modules = {toolchain, passes_module}
    for name in ("llvm_stage", "parts"):
        try:
            modules.add(importlib.import_module(f"compiler.backend.{name}"))
        except ImportError:
            pass
    patched = {(m, name): getattr(m, name) for m in modules
               for name in ("run_tool", "run_tool_until") if hasattr(m, name)}
    cpu: dict[str, float] = defaultdict(float)
    processes: dict[str, int] = defaultdict(int)
    extra = {"mlir-opt": ["--mlir-timing"], "llc": ["-time-passes"]}

    # One tool at a time: a build in parts runs two tool chains side by side, and the CPU time
    # of reaped children that one call measures would then include the other's (the sums came
    # out above the whole build's, and the rewrite-slot workers' share negative).
    one_at_a_time = threading.Lock()

    def timing(real):
        def timed(tool: str, args: list[str], timings: dict[str, float], stage: str, *stop) -> object:
            with one_at_a_time:
                c0 = _children_cpu()
                out = real(tool, [*extra.get(tool, []), *args], timings, stage, *stop)
                cpu[tool] += _children_cpu() - c0
            processes[tool] += 1
            reports[tool].append((out[1] if stop else out) or "")   # None: an older tree's run_tool
            return out
        return timed
    for (module, name), real in patched.items():
        setattr(module, name, timing(real))
    restore = _time_started_tools(extra, one_at_a_time, cpu, processes, reports)
    c0, k0 = time.process_time(), _children_cpu()
    try:
        result = toolchain.compile_mlir(mlir, work / "out.so", opt_level=0, work_dir=work)
    finally:
        for (module, name), real in patched.items():
            setattr(module, name, real)
        restore()
    python = time.process_time() - c0
    others = _children_cpu() - k0 - sum(cpu.values())   # the workers of needed rewrite slots
    if not result.ok:
        print("\n".join(d.message for d in result.diagnostics))
        return 1
    print(f"emitted MLIR: {len(mlir) / 1e3:.0f} KB, {mlir.count(chr(10))} lines")
    rows = [*stages.items(), *((f"{t} ({processes[t]} process{'es' if processes[t] > 1 else ''})", c)
                               for t, c in cpu.items()), ("back end's Python (rewrite checks, files)", python),
            ("rewrite-slot workers", others)]
    _print_stages(rows)
    totals = mlir_pass_totals(reports["mlir-opt"])
    print(f"top mlir-opt passes (wall, summed over its {processes['mlir-opt']} processes):")
    for name, s in sorted(totals.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {s:8.3f} s  {name}")
    print("top llc -O0 passes (wall):")
    print("\n".join("  " + r for r in _llvm_top("\n".join(reports["llc"]), top)))
    return 0


def _time_started_tools(extra: dict[str, list[str]], lock: threading.Lock, cpu: dict[str, float],
                        processes: dict[str, int], reports: dict[str, list[str]]) -> Callable[[], None]:
    """Time the tools started ahead of their input (tools.StartedTool: -O0's mlir-translate and
    llc in newer trees) as profile_o0 times run_tool's; returns what undoes it.  A started
    tool's CPU is counted when `finish` reaps it (its start-up included)."""
    from compiler.backend import tools as tools_module
    started = getattr(tools_module, "StartedTool", None)
    if started is None:
        return lambda: None
    real_init, real_finish = started.__init__, started.finish

    def init(self: Any, tool: str, args: list[str]) -> None:
        real_init(self, tool, [*extra.get(tool, []), *args])

    def finish(self: Any, data: str, timings: dict[str, float], stage: str) -> str:
        with lock:
            c0 = _children_cpu()
            out: str = real_finish(self, data, timings, stage)
            cpu[self.tool] += _children_cpu() - c0
        processes[self.tool] += 1
        reports[self.tool].append(self.stderr or "")
        return out

    started.__init__, started.finish = init, finish

    def restore() -> None:
        started.__init__, started.finish = real_init, real_finish
    return restore


def _print_stages(rows: list[tuple[str, float]]) -> None:
    total = sum(c for _, c in rows)
    print(f"{'stage':<44}{'CPU s':>8}{'share':>8}")
    for name, c in rows:
        print(f"{name:<44}{c:8.3f}{100 * c / total:7.1f}%")
    print(f"{'total':<44}{total:8.3f}")


ENGINE_CHILD = r"""
import resource, sys, time
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from typing import Any
from compiler import build
from compiler.backend import engine, llvm_stage, pipelines
from compiler.backend.bindings import engine_module
from compiler.core.diagnostics import SourceText
path, level, work = sys.argv[1], int(sys.argv[2]), Path(sys.argv[4])
text = Path(path).read_text()
res = build.BuildResult(False, source=SourceText(text, path))
c0 = time.process_time()
mlir = build.front_end(text, path, {}, res)
print(f"front end: {time.process_time() - c0:.3f} s CPU; emitted MLIR {len(mlir) / 1e3:.0f} KB", flush=True)
passes = pipelines.passes_for(mlir, level, work)
c0 = time.process_time()
ir, passmanager, _ = engine_module()
import importlib
for name in ('mlir.dialects.linalg', 'mlir.dialects.llvm'):
    importlib.import_module(name)   # what the build's worker loads ahead
print(f"loading the MLIR bindings: {time.process_time() - c0:.3f} s CPU", flush=True)
with ir.Context() as ctx:
    ctx.enable_multithreading(False)
    c0 = time.process_time()
    module = ir.Module.parse(mlir)
    engine.prepare_for_script(ir, module, passes)
    print(f"parse + rewrites before the pipeline: {time.process_time() - c0:.3f} s CPU", flush=True)
    c0 = time.process_time()
    engine.run_pipeline(ir, passmanager, module, passes, mlir, enable_timing=True)
    print(f"MLIR passes (with the slots' rewrites): {time.process_time() - c0:.3f} s CPU", flush=True)
    c0 = time.process_time()
    engine._append_packed(ir, module, mlir)
    merged = llvm_stage.dedupe_kernels(ir, module)
    ll = engine._translate(ir, module)
    n_funcs = sum(1 for op in module.body.operations if op.operation.name == "llvm.func")
    print(f"entry points + kernel merging ({merged} merged) + translation: {time.process_time() - c0:.3f} s CPU; "
          f"LLVM IR {len(ll) / 1e6:.2f} MB, {n_funcs} llvm.func", flush=True)
(work / "lowered.ll").write_text(ll)
"""


def profile_engine(path: Path, level: int, work: Path, top: int, timeout: float) -> int:
    """-O1..-O3: the engine's part in a child (MLIR pass timing), then opt and llc as the build runs them."""
    proc = subprocess.run([sys.executable, "-c", ENGINE_CHILD, str(path), str(level), str(ROOT), str(work)],
                          capture_output=True, text=True, timeout=timeout)
    print(proc.stdout.rstrip())
    if proc.returncode:
        print(proc.stderr[-2000:])
        return 1
    print("top MLIR passes (wall):")
    print("\n".join("  " + r for r in _top(proc.stderr, top)))
    return llvm_profile(work, level, top)


def llvm_profile(work: Path, level: int, top: int) -> int:
    from compiler.backend import llvm_stage
    from compiler.backend.tools import find_tool
    ll, bc = work / "lowered.ll", work / "opt.bc"
    vector_lib = ["-vector-library=LIBMVEC"] if llvm_stage.vector_math() else []
    target = llvm_stage.host_target()
    steps = [(f"opt -O{level}", [str(find_tool("opt")), f"-O{level}", *llvm_stage.OPT_FLAGS, *target, *vector_lib,
                                 "-time-passes", str(ll), "-o", str(bc)]),
             (f"llc -O{level}", [str(find_tool("llc")), f"-O{level}", *llvm_stage.LLC_FLAGS, *target, "-time-passes",
                                 "-relocation-model=pic", "-filetype=obj", str(bc), "-o", str(work / "llc.o")])]
    split = ll.stat().st_size >= llvm_stage.SPLIT_MIN_BYTES
    print(f"LLVM IR {ll.stat().st_size / 1e6:.2f} MB: the build " + ("splits it in two halves run side by side"
                                                               if split else "runs it as one part"))
    for name, cmd in steps:
        c0 = _children_cpu()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            print(f"{name} failed: {proc.stderr[-1000:]}")
            return 1
        print(f"{name}: {_children_cpu() - c0:.2f} s CPU (whole module)")
        print("\n".join("  " + r for r in _llvm_top(proc.stderr, top)))
    return 0
