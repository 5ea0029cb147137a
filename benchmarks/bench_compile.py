"""Per-stage compile time of the StoryLM-0 mean-NLL step (target: <= 1 s in all).

    .venv/bin/python benchmarks/bench_compile.py [FILE.kina] [--runs N] [-O2]

Prints the median time of each stage (parse, check, autodiff, emit, mlir-opt,
mlir-translate, llc, cc, manifest) over N builds."""
import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compiler import build  # noqa: E402

DEFAULT = ROOT / "examples" / "storylm0_mean_nll_step.kina"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("file", nargs="?", default=str(DEFAULT))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("-O2", dest="opt_level", action="store_const", const=2, default=0)
    args = ap.parse_args()
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.runs):
            timings: dict = {}
            res = build.build_file(args.file, Path(tmp) / "lib.so", args.opt_level, timings)
            if not res.ok:
                build.print_diagnostics(res)
                return 1
            for k, v in timings.items():
                samples.setdefault(k, []).append(v)
    print(f"{Path(args.file).name}: median of {args.runs} builds at -O{args.opt_level}")
    medians = {k: statistics.median(v) for k, v in samples.items()}
    print(build.format_timings(medians))
    totals = [sum(run) for run in zip(*samples.values())]
    print(f"  best total {min(totals) * 1000:.1f} ms (target <= 1000 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
