"""Per-stage compile time of the StoryLM-0 training step (target: <= 1 s in all).

    .venv/bin/python benchmarks/bench_compile.py [FILE.kina] [--runs N] [--levels 0 2]

The default file is examples/storylm.kina built at StoryLM-0's sizes, its train_step
only (--size B=1 --size T=4 --size H=2 --size DH=2 --size V=8).

For each level, prints the median time of each stage over N builds in this
process: parse+check, autodiff, emit, then the toolchain's stages (-O0: the
mlir-opt, mlir-translate, llc and cc processes; -O2: the in-process passes,
LLVM optimisation, code generation, and cc).  -O2 imports the MLIR Python
bindings once per process; that one-time cost is printed separately (a fresh
`kinac build -O2` pays it).  The header gives the usable cores and the load
average, since other processes on the machine slow every stage."""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compiler import build, build_cli  # noqa: E402
from compiler.backend import engine, pipelines  # noqa: E402

DEFAULT = ROOT / "examples" / "storylm.kina"
STORYLM0 = {"B": 1, "T": 4, "H": 2, "DH": 2, "V": 8}     # scripts/storylm_data.py SIZES
TARGET_MS = 1000


def bench_level(path: str, level: int, runs: int, tmp: Path) -> int:
    samples: dict[str, list[float]] = {}
    for _ in range(runs):
        timings: dict = {}
        default = Path(path) == DEFAULT
        res = build.build_file(path, tmp / f"lib_O{level}.so", level, timings, cache=False,
                               sizes=STORYLM0 if default else None,
                               transform=build.keep_exports(["train_step"]) if default else None)
        if not res.ok:
            build.print_diagnostics(res)
            return 1
        for k, v in timings.items():
            samples.setdefault(k, []).append(v)
    print(f"-O{level}: median of {runs} builds")
    print(build_cli.format_timings({k: statistics.median(v) for k, v in samples.items()}))
    totals = sorted(sum(run) for run in zip(*samples.values()))
    print(f"  median total {statistics.median(totals) * 1000:.1f} ms, best {totals[0] * 1000:.1f} ms "
          f"(target <= {TARGET_MS} ms)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("file", nargs="?", default=str(DEFAULT))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--levels", type=int, nargs="+", default=[0, 2])
    args = ap.parse_args()
    print(f"{Path(args.file).name}; {len(os.sched_getaffinity(0))} cores usable; "
          f"load average {os.getloadavg()[0]:.2f}")
    if any(pipelines.pipeline_for(level).backend == "engine" for level in args.levels):
        t0 = time.perf_counter()
        engine.engine_module()
        print(f"one-time import of the MLIR Python bindings: {(time.perf_counter() - t0) * 1000:.0f} ms")
    with tempfile.TemporaryDirectory() as tmp:
        for level in args.levels:
            if bench_level(args.file, level, args.runs, Path(tmp)):
                return 1
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
