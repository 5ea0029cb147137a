"""An edit of one function, rebuilt in a warm process (the editor's Build & validate loop):
issue 27's "an edit of one function rebuilding in at most half of" the cold build.

    .venv/bin/python benchmarks/bench_edit_rebuild.py [FILE.kina] [--levels 0 2] [--edits 3]

FILE (default: tests/programs/gpt_block.kina, the issue's GPT block) is copied to a temporary
folder and built with compiler.build.build_file in this one process, with the build cache on in
a fresh temporary folder (KINA_CACHE_DIR): once as written (nothing cached), then --edits times
with its first `1e-5` literal in code (the GPT block's layer_norm eps) replaced by another value, one
edit of one function: the library is a miss, the -O2 LLVM stage's objects of the parts the
edit did not change are hits.  --no-cache builds everything every time.  As the language
server does after each Build & validate, the process keeps an -O2 worker warm for the next
build (compiler.build.keep_backend_warm; --cold-worker: not) and, as the server does from its
first build, marks itself as a process that builds again (compiler.build.builds_again: its -O2
builds of a large module then run in parts side by side), and --pause seconds (the
time an edit takes) pass between builds.  Wall seconds of each build, per level.
"""
from __future__ import annotations

import argparse
import os
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


def _literal_at(source: str) -> int:
    """Offset of the first NEEDLE in code, not in a `//` comment (-1: none)."""
    offset = 0
    for line in source.splitlines(keepends=True):
        code = line.split("//", 1)[0]
        if NEEDLE in code:
            return offset + code.index(NEEDLE)
        offset += len(line)
    return -1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--levels", nargs="+", type=int, default=[0, 2])
    ap.add_argument("--edits", type=int, default=3)
    ap.add_argument("--no-cache", action="store_true", help="the build cache off (no object reused)")
    ap.add_argument("--cold-worker", action="store_true", help="no -O2 worker kept warm between builds")
    ap.add_argument("--pause", type=float, default=1.0, help="seconds between builds (an edit)")
    args = ap.parse_args()
    source = args.file.read_text()
    at = _literal_at(source)
    if at < 0:
        raise SystemExit(f"{args.file} has no `{NEEDLE}` literal to edit (outside comments)")
    print(timing.machine_line())
    if not args.cold_worker:
        build.builds_again()     # as the language server marks itself before its first build
    with tempfile.TemporaryDirectory() as d:
        os.environ["KINA_CACHE_DIR"] = str(Path(d) / "cache")   # a fresh cache: the first build misses all
        path = Path(d) / args.file.name
        for level in args.levels:
            times = []
            for k in range(args.edits + 1):
                path.write_text(source[:at] + f"{k + 1}e-5" + source[at + len(NEEDLE):] if k else source)
                t0 = time.perf_counter()
                res = build.build_file(path, Path(d) / f"lib{level}_{k}.so", level, cache=not args.no_cache)
                times.append(time.perf_counter() - t0)
                if not res.ok:
                    build.print_diagnostics(res)
                    raise SystemExit(f"building {args.file} at -O{level} failed")
                if not args.cold_worker:
                    build.keep_backend_warm(level)
                time.sleep(args.pause)
            build.release_backend()
            edits = ", ".join(f"{t:.2f}" for t in times[1:])
            mode = "".join([" (no cache)" if args.no_cache else "", " (cold worker)" if args.cold_worker else ""])
            print(f"-O{level}{mode}: first build {times[0]:.2f} s; after an edit of one function: {edits} s")
    print(f"load average {timing.load():.2f}")


if __name__ == "__main__":
    main()
