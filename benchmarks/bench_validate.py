"""`kinac validate` wall and CPU time: the GPT block of issue 27 and the examples, default
(directional gradient checks) against --exhaustive (per element).

    .venv/bin/python benchmarks/bench_validate.py [--level 0] [--repeat 3] [--files a.kina ...]
                                                  [--modes default exhaustive] [--cache]
                                                  [--root /work/main]   # another checkout: "before"

Each run is `kinac validate -O<level> --timings FILE [--exhaustive]` in a child process
(imports, build, the library's child process and the checks, as a user runs it), with the
build cache off unless --cache.  It prints the median wall time, the median CPU time of
the command and everything it started (on a loaded machine the steadier figure), the
median of each phase validate reports (build; inputs; references: the interpreter;
gradients: the finite differences; child: the library's child process beyond the
comparisons that overlap it) and the machine load.  A failing validation is reported,
never timed as a pass.  --root runs another checkout's compiler on the same files (a
checkout from before --timings and --exhaustive: its one mode, per element, and no phases).
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import timing  # noqa: E402

GPT = ROOT / "tests" / "programs" / "gpt_block.kina"
EXAMPLES = ["ad_reduce_sum.kina", "mlp_classifier.kina", "decoder_block.kina", "storylm.kina"]
PHASES = ("build", "inputs", "references", "gradients", "child")


def run_once(root: Path, path: Path, level: int, exhaustive: bool, cache: bool) -> dict[str, float | str]:
    """One `kinac validate` by the compiler in `root`: wall, cpu (the command and its
    children), its phases, its verdict."""
    cmd = [sys.executable, "-m", "compiler.cli", "validate", f"-O{level}", str(path)]
    if "--timings" in (root / "compiler" / "oracle" / "validate.py").read_text():
        cmd.append("--timings")
    if exhaustive:
        cmd.append("--exhaustive")
    env = dict(os.environ, PYTHONPATH=str(root), **({} if cache else {"KINA_CACHE": "0"}))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out: dict[str, float | str] = {"wall": wall, "cpu": (after.ru_utime - before.ru_utime)
                                   + (after.ru_stime - before.ru_stime)}
    line = next((x for x in proc.stderr.splitlines() if x.startswith("validate timings:")), "")
    for phase, seconds in re.findall(r"(\w+) ([\d.]+) s", line):
        out[phase] = float(seconds)
    summary = proc.stdout.strip().splitlines()[-1:] or proc.stderr.strip().splitlines()[-1:] or ["?"]
    out["verdict"] = ("ok " if proc.returncode == 0 else "FAILED ") + summary[0]
    return out


def median(runs: list[dict[str, float | str]], key: str) -> float:
    values = [float(r[key]) for r in runs if key in r]
    return statistics.median(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--level", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--files", nargs="*", type=Path, default=[GPT, *(ROOT / "examples" / e for e in EXAMPLES)])
    ap.add_argument("--modes", nargs="*", choices=("default", "exhaustive"), default=["default", "exhaustive"])
    ap.add_argument("--cache", action="store_true", help="keep the build cache on (default: off)")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose compiler runs")
    args = ap.parse_args(argv)
    if args.root.resolve() != ROOT:
        args.modes = ["default"]     # an older checkout: validate has one mode
    print(f"# {timing.machine_line()}; load {os.getloadavg()[0]:.2f} at start; -O{args.level}; "
          f"median of {args.repeat}; build cache {'on' if args.cache else 'off'}; compiler of {args.root}")
    print(f"{'file':<22} {'mode':<10} {'wall s':>7} {'cpu s':>7}  " + " ".join(f"{p:>10}" for p in PHASES)
          + "  verdict")
    for path in args.files:
        for mode in args.modes:
            runs = [run_once(args.root, path.resolve(), args.level, mode == "exhaustive", args.cache)
                    for _ in range(args.repeat)]
            phases = " ".join(f"{median(runs, p):>10.2f}" for p in PHASES)
            print(f"{path.name:<22} {mode:<10} {median(runs, 'wall'):>7.2f} {median(runs, 'cpu'):>7.2f}  {phases}"
                  f"  {runs[-1]['verdict']}", flush=True)
    print(f"# load {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
