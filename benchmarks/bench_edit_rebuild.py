"""An edit of one function, rebuilt in a warm process (the editor's Build & validate loop):
issue 27's "an edit of one function rebuilding in at most half of" the cold build.

    .venv/bin/python benchmarks/bench_edit_rebuild.py [FILE.kina] [--levels 0 2] [--edits 3]

FILE (default: tests/programs/gpt_block.kina, the issue's GPT block) is copied to a temporary
folder and built with compiler.build.build_file in this one process, the build cache off: once
as written, then --edits times with its first `1e-5` literal (the GPT block's layer_norm eps)
replaced by another value, one edit of one function.  Wall seconds of each build, per level.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import timing  # noqa: E402

from compiler import build  # noqa: E402

DEFAULT = HERE.parent / "tests" / "programs" / "gpt_block.kina"
NEEDLE = "1e-5"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--levels", nargs="+", type=int, default=[0, 2])
    ap.add_argument("--edits", type=int, default=3)
    args = ap.parse_args()
    source = args.file.read_text()
    if NEEDLE not in source:
        raise SystemExit(f"{args.file} has no `{NEEDLE}` literal to edit")
    print(timing.machine_line())
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / args.file.name
        for level in args.levels:
            times = []
            for k in range(args.edits + 1):
                path.write_text(source.replace(NEEDLE, f"{k + 1}e-5", 1) if k else source)
                t0 = time.perf_counter()
                res = build.build_file(path, Path(d) / f"lib{level}_{k}.so", level, cache=False)
                times.append(time.perf_counter() - t0)
                if not res.ok:
                    build.print_diagnostics(res)
                    raise SystemExit(f"building {args.file} at -O{level} failed")
            edits = ", ".join(f"{t:.2f}" for t in times[1:])
            print(f"-O{level}: first build {times[0]:.2f} s; after an edit of one function: {edits} s")
    print(f"load average {timing.load():.2f}")


if __name__ == "__main__":
    main()
