"""Differential testing of the compiler on generated programs (compiler/oracle/progen/generate.py):
the interpreter in float64, -O0, -O2, PyTorch and finite differences must agree
(compiler/oracle/differential.py), or each failure is shrunk and written as a .kina file.

    python scripts/fuzz_compile.py --n 3000 --seed 0            # 3,000 programs, both levels
    python scripts/fuzz_compile.py --n 300 --seed 1 --out DIR   # make test's share
    python scripts/fuzz_compile.py --replay tests/regressions/*.kina
    python scripts/fuzz_compile.py --n 50 --dtypes F64          # F64 programs only
    python scripts/fuzz_compile.py --dynamic --n 1000 --seed 0    # dynamic exports (issue 25)

--dynamic checks dynamic exports instead (compiler/oracle/dynamic_fuzz.py): every program
gets size-generic helpers (unless --generic-fraction says otherwise), each batch is built
once per level without --size, and each generic helper, a dynamic export, is called at
three size assignments and compared with the interpreter and with a build bound to those
sizes.

Besides each program's own functions, the run checks (compiler/oracle/differential_runs.py)
VJP exports: one program under reverseMode in four is built with `--vjp f` (and `--vjp f_s<k>`,
a dynamic export, for a size-generic helper it differentiates), and f_vjp(x.., g_y) at a
random cotangent is held to the interpreter's VJP in float64 by the usual rule; and random
values: a program that draws random numbers gets a probe `f_bits` returning them all
(keys included), which must equal the interpreter's bit for bit at every level.  --no-vjp
and --no-bits turn these off.  --chunk K/N checks the K-th of N equal parts of the seeds;
--jobs J runs J such chunks at once, one process each (make test uses both cores this way),
and prints each chunk's report whole as it finishes.

Prints one line per failure as it is found, then the counts (programs, programs under
reverseMode, functions, builds, mismatches, crashes), the time per phase and the machine
load; exits 1 when anything failed.  Failing programs go to --out (default
artifacts/fuzz) as <kind>-O<level>-c<seed>.kina, shrunk (unless --no-shrink), each with
the command that reproduces it.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from compiler.backend.pipelines import PIPELINES  # noqa: E402
from compiler.core.types import DType  # noqa: E402
from compiler.oracle import differential, dynamic_fuzz, shrink  # noqa: E402
from compiler.oracle.progen import generate as progen  # noqa: E402


def _levels(text: str) -> tuple[int, ...]:
    """`--levels 0,2`: a comma list of known levels, refused at once otherwise (a bad
    level used to fail every batch's build, one message per program)."""
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of levels: {text!r}") from None
    unknown = [lv for lv in levels if lv not in PIPELINES]
    if unknown or not levels:
        raise argparse.ArgumentTypeError(f"levels must be among {', '.join(map(str, sorted(PIPELINES)))}, "
                                         f"not {text!r}")
    return levels


def _dtypes(text: str) -> tuple[tuple[DType, int], ...]:
    """`--dtypes F64,F32`: the float dtypes to generate, each with weight 1."""
    try:
        dtypes = [DType.named(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError as err:
        raise SystemExit(f"--dtypes: {err}") from None
    if not dtypes or not all(d.is_float for d in dtypes):
        raise SystemExit(f"--dtypes: a comma list of float dtypes, not {text!r}")
    return tuple((d, 1) for d in dtypes)


def _chunk(text: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not K/N: {text!r}") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"K/N needs 1 <= K <= N, not {text!r}")
    return k, n


def _seeds(args) -> range:
    if args.chunk is None:
        return range(args.seed, args.seed + args.n)
    k, n = args.chunk
    per = -(-args.n // n)
    return range(args.seed + (k - 1) * per, args.seed + min(args.n, k * per))


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=300, help="number of generated programs")
    ap.add_argument("--seed", type=int, default=0, help="seed of the first program (seeds S .. S+N-1)")
    ap.add_argument("--batch", type=int, default=50, help="programs per library (one build per -O level)")
    ap.add_argument("--levels", default="0,2", type=_levels,
                    help="optimisation levels to compile at, from 0-3 (default 0,2)")
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "fuzz"), help="where failing programs are written")
    ap.add_argument("--no-shrink", action="store_true", help="write failing programs as generated")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch reference")
    ap.add_argument("--no-vjp", action="store_true", help="build no `--vjp f` exports (compiler/oracle/differential_runs.py)")
    ap.add_argument("--no-bits", action="store_true", help="no bitwise check of random values (random probes)")
    ap.add_argument("--generic-fraction", type=float, default=None, metavar="F",
                    help="share of programs with size-generic helpers (default: the generator's, 0.2; "
                         "1 makes every program generic)")
    ap.add_argument("--big-fraction", type=float, default=None, metavar="F",
                    help="share of programs whose tensors may hold 131,072 elements, half of them starting "
                         "with a 2,048-column LM head that -O2 packs (default: the generator's, 0.03)")
    ap.add_argument("--ops", default=None, metavar="OP,OP",
                    help="restrict the single-op steps to these ops (GenConfig.ops), e.g. a new op's rows")
    ap.add_argument("--dtypes", default=None, metavar="D,D",
                    help="generate only these float dtypes, equally often (GenConfig.dtypes), e.g. F64")
    ap.add_argument("--dynamic", action="store_true",
                    help="differential testing of dynamic exports (compiler/oracle/dynamic_fuzz.py)")
    ap.add_argument("--grad", action="store_true",
                    help="with --dynamic: also a generic reverseMode wrapper of each helper, a dynamic export too")
    ap.add_argument("--chunk", type=_chunk, default=None, metavar="K/N",
                    help="check only the K-th of N equal parts of the seeds (K from 1)")
    ap.add_argument("--jobs", type=int, default=1, metavar="J",
                    help="run J chunks of the seeds at once, one process each (not with --chunk or --replay)")
    ap.add_argument("--replay", nargs="*", metavar="FILE", help="check these .kina files instead of generating")
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs needs at least 1, not {args.jobs}")
    if args.jobs > 1 and (args.chunk is not None or args.replay is not None):
        ap.error("--jobs splits the seeds itself: not with --chunk or --replay")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.jobs > 1:
        return main_jobs(args.jobs, sys.argv[1:] if argv is None else list(argv))
    if args.dynamic:
        return main_dynamic(args)
    levels = args.levels
    out = Path(args.out)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kina-fuzz-") as tmp:
        oracle = differential.Oracle(tmp, levels=levels, use_torch=False if args.no_torch else None,
                                     vjp=not args.no_vjp, bits=not args.no_bits)
        if args.replay:
            units = [differential.unit_of_source(f"r{i}", differential.rename_functions(Path(p).read_text(), f"r{i}_"))
                     for i, p in enumerate(args.replay)]
            failures = oracle.run_units(units)
            _print(failures)
        else:
            config = progen.DEFAULT if args.generic_fraction is None else \
                dataclasses.replace(progen.DEFAULT, generic_fraction=args.generic_fraction)
            if args.big_fraction is not None:
                config = dataclasses.replace(config, big_fraction=args.big_fraction)
            if args.ops:
                config = dataclasses.replace(config, ops=tuple(args.ops.split(",")))
            if args.dtypes:
                config = dataclasses.replace(config, dtypes=_dtypes(args.dtypes))
            seeds = _seeds(args)
            failures = differential.run_seeds(oracle, seeds, config, batch=args.batch,
                                              on_batch=lambda done, found: _progress(done, len(seeds), found, t0))
            if failures:
                _write(failures, out, Path(tmp) / "shrink", not args.no_shrink)
        _summary(oracle, failures, time.perf_counter() - t0, levels, torch=oracle.use_torch)
    return 1 if failures else 0


def main_jobs(jobs: int, argv: list[str]) -> int:
    """--jobs J: this script once per chunk K/J, at once; each chunk's report is printed whole
    (headed by its chunk) when it finishes, so reports never interleave.  Exits 1 if any failed."""
    cmd = [sys.executable, __file__, *_without_jobs(argv)]
    procs = [subprocess.Popen([*cmd, "--chunk", f"{k}/{jobs}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for k in range(1, jobs + 1)]
    failed = []
    for k, proc in enumerate(procs, 1):
        out, _ = proc.communicate()
        print(f"== chunk {k}/{jobs} (exit {proc.returncode})\n{out}", end="", flush=True)
        if proc.returncode:
            failed.append(k)
    print(f"chunks failed: {', '.join(map(str, failed))}" if failed else f"all {jobs} chunks passed")
    return 1 if failed else 0


def _without_jobs(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--jobs":
            skip = True
        elif not a.startswith("--jobs="):
            out.append(a)
    return out


def main_dynamic(args) -> int:
    """--dynamic: dynamic exports against the interpreter and the statically bound build."""
    t0 = time.perf_counter()
    config = dataclasses.replace(progen.DEFAULT, generic_fraction=1.0 if args.generic_fraction is None
                                 else args.generic_fraction)
    seeds = _seeds(args)
    with tempfile.TemporaryDirectory(prefix="kina-dynfuzz-") as tmp:
        oracle = dynamic_fuzz.DynamicOracle(tmp, levels=args.levels, seed=args.seed, grad=args.grad)
        failures = differential.run_seeds(oracle, seeds, config, batch=args.batch,
                                          on_batch=lambda done, found: _progress(done, len(seeds), found, t0))
        if failures:
            _write(failures, Path(args.out), Path(tmp) / "shrink", not args.no_shrink,
                   lambda f, work: dynamic_fuzz.still_fails(f, work, args.seed, args.grad))
        _summary_dynamic(oracle, failures, time.perf_counter() - t0, args.levels, seeds)
    return 1 if failures else 0


def _summary_dynamic(oracle, failures, seconds: float, levels, seeds) -> None:
    s = oracle.stats
    kinds = Counter(f.kind for f in failures)
    mismatches = sum(kinds[k] for k in dynamic_fuzz.MISMATCH_KINDS)
    crashes = sum(kinds[k] for k in dynamic_fuzz.CRASH_KINDS)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"seeds {seeds.start}..{seeds.stop - 1}: programs {s.programs} with dynamic exports, dynamic exports {s.exports}, "
          f"(export, sizes) runs {s.runs}, library calls {s.calls}, builds {s.builds} at "
          f"{', '.join(f'-O{lv}' for lv in levels)}; dynamic results identical to the static build's in "
          f"{s.identical} of {s.compared}")
    print(f"mismatches {mismatches}, crashes {crashes}" +
          (" (" + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + ")" if kinds else ""))
    phases = ", ".join(f"{k} {v:.0f} s" for k, v in sorted({**oracle.base.stats.seconds, **s.seconds}.items()))
    print(f"time {seconds:.0f} s wall ({phases}; load average {load:.1f})")


def _print(failures) -> None:
    for f in failures:
        print(f"FAIL {f.headline()}", flush=True)


def _progress(done: int, total: int, found, t0: float) -> None:
    _print(found)
    print(f"  {done}/{total} programs checked, {time.perf_counter() - t0:.0f} s", flush=True)


def _write(failures, out: Path, work: Path, do_shrink: bool, predicate=differential.still_fails) -> None:
    """One file per failing case (its first failure), shrunk to a minimal reproducer."""
    out.mkdir(parents=True, exist_ok=True)
    first: dict[str, differential.Failure] = {}
    for f in failures:
        first.setdefault(f.name, f)
    for name, f in first.items():
        case = small = f.case
        if case is None:
            if f.source is not None:     # cases that fail only together: the module as it was
                path = out / f"{f.kind}-O{f.level}-{name.replace('..', '-')}.kina"
                path.write_text("".join(f"// {l}\n" for l in f.detail.splitlines()[:8]) + f.source)
                print(f"wrote {path} (the whole batch)", flush=True)
            continue
        if do_shrink and f.kind != "generator":
            small = shrink.shrink(case, predicate(f, work / name))
        level = f"-O{f.level}" if f.level is not None else ""
        path = out / f"{f.kind}{level}-{name}.kina"
        path.write_text(differential.reproducer(f, small, case))
        print(f"wrote {path} ({len(small.lets)} lets)", flush=True)


def _summary(oracle, failures, seconds: float, levels, torch: bool) -> None:
    s = oracle.stats
    kinds = Counter(f.kind for f in failures)
    mismatches = sum(kinds[k] for k in differential.MISMATCH_KINDS)
    crashes = sum(kinds[k] for k in differential.CRASH_KINDS)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"programs {s.cases} ({s.ad_cases} under reverseMode, {s.generic_cases} with size-generic helpers), "
          f"functions {s.functions}, "
          f"builds {s.builds} at {', '.join(f'-O{lv}' for lv in levels) or 'no level'}; "
          f"PyTorch checks {s.torch_checked}{'' if torch else ' (PyTorch not importable)'}, "
          f"finite-difference checks {s.fd_checked} (parameters at a kink at every point {s.fd_kink_skipped}); outputs held to the same-dtype reference {s.ill_conditioned}")
    print(f"VJP exports checked {s.vjp_checked} ({s.vjp_dynamic} dynamic) against the interpreter's VJP; "
          f"programs with random ops compared bitwise {s.bits_cases} ({s.bits_values} random values, "
          f"interpreter vs {', '.join(f'-O{lv}' for lv in levels)})")
    print(f"mismatches {mismatches}, crashes {crashes}" +
          (" (" + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + ")" if kinds else ""))
    phases = ", ".join(f"{k} {v:.0f} s" for k, v in sorted(s.seconds.items()))
    print(f"time {seconds:.0f} s wall ({phases}; load average {load:.1f})")


if __name__ == "__main__":
    sys.exit(main())
