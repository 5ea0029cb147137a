"""A/B of the scaled StoryLM train step built by two (or more) checkouts, in one process.

    .venv/bin/python benchmarks/ab_step.py [TREE ...] [--rounds N] [--jax] [--config large] [--dynamic]
    .venv/bin/python benchmarks/ab_step.py /tmp/main-checkout .     # before (main) vs this tree

Each TREE is a checkout of this repository (default: this one); its `compiler` builds the
step at -O2 in a process of its own (the worker imports that tree's compiler), and this
process loads every library and times them in interleaved rounds of 10 steps (a burst of
load hits all of them in the same round): wall ms per step, and the CPU ms of the calling
thread (with OMP_NUM_THREADS=1 that is the whole step's CPU time, the figure least moved
by other processes on a shared machine).  --jax adds the jax.jit step in the same rounds.
Every library's result is checked against the NumPy reference first.  The OpenMP
settings (KMP_BLOCKTIME, ...) are the process's: those of the tree that runs this script.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

import numpy as np  # noqa: E402
import scaled_model as M  # noqa: E402

from compiler.backend import threads  # noqa: E402
from compiler.runtime import arrays  # noqa: E402
from compiler.runtime import library as runtime  # noqa: E402

BUILD = r"""
import json, sys, time
from pathlib import Path
root = Path(sys.argv[1]); sys.path[:0] = [str(root), str(root / "benchmarks")]
import scaled_model as M
from compiler import build
s = M.sizes(*M.CONFIGS[sys.argv[3]])
out = Path(sys.argv[2])
t0 = time.perf_counter()
if sys.argv[4] == "dynamic":  # without --size: one library for every size
    res = build.build_file(M.STORYLM, out, 2, {}, transform=build.keep_exports(M.EXPORTS), cache=False)
elif hasattr(M, "build"):    # examples/storylm.kina built with --size
    res = M.build(s, out, 2)
else:                        # a tree from before size-generic functions: its text template
    src = out.with_suffix(".kina")
    src.write_text(M.render("scaled_lm.kina.in", s))
    res = build.build_file(src, out, 2, {}, cache=False)
if not res.ok:
    build.print_diagnostics(res); sys.exit(1)
print(json.dumps({"build_s": time.perf_counter() - t0}))
"""


def build_in(tree: Path, out: Path, config: str, dynamic: bool) -> float:
    proc = subprocess.run([sys.executable, "-c", BUILD, str(tree), str(out), config,
                           "dynamic" if dynamic else "static"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"building with {tree} failed:\n{proc.stdout}{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["build_s"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="*", default=[str(ROOT)])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--jax", action="store_true", help="time jax.jit's step in the same rounds")
    ap.add_argument("--config", choices=sorted(M.CONFIGS), default="scaled", help="bench_scaled's sizes")
    ap.add_argument("--dynamic", action="store_true", help="the libraries built without --size (issue 25)")
    args = ap.parse_args(argv)
    threads.prepare_process()
    s = M.sizes(*M.CONFIGS[args.config])
    w = M.make_inputs(s)
    out = [np.empty((1, 1), np.float32)] + [arrays.empty(w[n].shape, w[n].dtype) for n in M.WEIGHTS]
    ref = M.np_train_step(w, s)
    fns = {}
    with tempfile.TemporaryDirectory(prefix="kina-ab-") as tmp:
        for i, tree in enumerate(args.trees):
            so = Path(tmp) / f"step{i}.so"   # one file name per library: dlopen returns the first of a path
            secs = build_in(Path(tree).resolve(), so, args.config, args.dynamic)
            lib = runtime.load(so)
            # by parameter name: an older tree's train_step also takes inv_n
            step_args = tuple(w[p.name] for p in lib.train_step.params)
            kw = {"H": s["H"]} if args.dynamic else {}   # H shows only as H * DH in the arrays
            lib.train_step(*step_args, out=out, **kw)
            name = f"{i}:{Path(tree).resolve().name}"
            print(f"{name}: build {secs:.2f} s, max rel err vs NumPy {M.max_error(tuple(out), ref):.1e}")
            fns[name] = (lambda lib=lib, step_args=step_args, kw=kw: lib.train_step(*step_args, out=out, **kw))
        if args.jax:
            import peers
            impl = peers.jax_impl(w, s)
            if isinstance(impl, peers.Impl):
                fns["jax.jit"] = impl.fns["train step"]
        cpu = {k: [] for k in fns}
        wall = {k: [] for k in fns}
        names = list(fns)
        for r in range(args.rounds):
            for k in names[r % len(names):] + names[:r % len(names)]:
                t0, w0 = time.thread_time(), time.perf_counter()
                for _ in range(10):
                    fns[k]()
                cpu[k].append((time.thread_time() - t0) * 100)
                wall[k].append((time.perf_counter() - w0) * 100)
    print(f"{'':<28}{'wall ms med':>12}{'min':>8}{'cpu ms med':>12}{'min':>8}  (this thread)")
    for k in names:
        print(f"{k:<28}{statistics.median(wall[k]):12.2f}{min(wall[k]):8.2f}"
              f"{statistics.median(cpu[k]):12.2f}{min(cpu[k]):8.2f}")
    print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(all cores)')} "
          f"KMP_BLOCKTIME={os.environ.get('KMP_BLOCKTIME')}; load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
