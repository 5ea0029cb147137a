"""The language server across files (issue 29): an edit in a file imported by 50 others.

A temporary folder holds lib.kina (the 5,000-line benchmark file of bench_lsp.make_source:
500 ten-line functions) and 50 importers, each `import lib` and a few functions of its own
calling `lib.layerK`.  A fresh server opens all 51; then each of `reps` edits of lib.kina
(inside a function body: a shape error, then its repair, as lsp_scale.py's edits) is timed

  edit -> lib's diagnostics       the edited file's own publishDiagnostics
  edit -> all importers refreshed the last of the 50 importers' publishDiagnostics after it

Usage: python benchmarks/lsp_importers.py [--reps 20] [--importers 50] [--lines 5000]
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_lsp import Bench, _pos, make_source  # noqa: E402
from timing import machine_line  # noqa: E402

IMPORTER = """import lib

fn use{i}_a(x: Tensor[F32, [4, 8]], w: Tensor[F32, [8, 8]]) -> Tensor[F32, [4, 8]] {{
  let y = lib.layer{k}(x, w) in
  y.tanh()
}}

fn use{i}_b(x: Tensor[F32, [4, 8]], w: Tensor[F32, [8, 8]]) -> Tensor[F32, [4, 8]] {{
  let y = use{i}_a(x, w) in
  lib.layer{k2}(y, w)
}}
"""


class MultiBench(Bench):
    """Bench, with the arrival time of every publishDiagnostics per URI."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[tuple[str, int | None, float]] = []

    def _published(self, params: dict) -> None:
        self.arrivals.append((params["uri"], params.get("version"), time.perf_counter()))

    async def until(self, done, timeout: float = 300.0) -> float:
        """Wait until done(arrivals) is a time; return it."""
        deadline = time.perf_counter() + timeout
        while (t := done(self.arrivals)) is None:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), max(0.01, deadline - time.perf_counter()))
        return t


def _open(b: Bench, path: Path) -> str:
    uri = path.as_uri()
    b.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "kina", "version": 1,
                                                        "text": path.read_text()}})
    return uri


async def run(reps: int, n_importers: int, lines: int) -> None:
    functions = lines // 10
    with tempfile.TemporaryDirectory(prefix="kina-lsp-importers-") as tmp:
        root = Path(tmp)
        (root / "lib.kina").write_text(make_source(functions))
        for i in range(n_importers):
            (root / f"imp{i}.kina").write_text(IMPORTER.format(i=i, k=i % functions, k2=(7 * i) % functions))
        b = MultiBench()
        await b.start()
        t0 = time.perf_counter()
        lib = _open(b, root / "lib.kina")
        users = [_open(b, root / f"imp{i}.kina") for i in range(n_importers)]
        everyone = {lib, *users}
        await b.until(lambda arr: max(t for *_, t in arr) if everyone <= {u for u, _, _ in arr} else None)
        print(f"-- lib.kina: {lines} lines, imported by {n_importers} open files; "
              f"all 51 opened and analysed in {time.perf_counter() - t0:.2f} s")
        own, importers = [], []
        version = 1
        for k in range(reps):
            fn = (k * 37) % functions
            line = 10 * fn + 3                   # `  let h2 = h1 + x in`: x -> w is a shape error
            version += 1
            mark = len(b.arrivals)
            sent = b.change(lib, version, [{"range": {"start": _pos(line, 16), "end": _pos(line, 17)},
                                            "text": "w" if k % 2 == 0 else "x"}])
            mine = await b.until(lambda arr, v=version, mark=mark: next(
                (t for u, ver, t in arr[mark:] if u == lib and ver == v), None))
            todo = set(users)

            def last(arr: list, todo: set = todo, mark: int = mark) -> float | None:
                seen = {u: t for u, _, t in arr[mark:] if u in todo}
                return max(seen.values()) if len(seen) == len(todo) else None
            everyone_t = await b.until(last)
            own.append(mine - sent)
            importers.append(everyone_t - sent)
        rss = b.rss_mb()
        await b.stop()
    print(f"  edit -> lib's diagnostics          p50 {1000 * statistics.median(own):8.2f} ms   "
          f"max {1000 * max(own):8.2f} ms")
    print(f"  edit -> all {n_importers} importers refreshed   p50 {1000 * statistics.median(importers):8.2f} ms   "
          f"max {1000 * max(importers):8.2f} ms")
    print(f"  ({reps} edits; server RSS {rss or 0:.0f} MB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--importers", type=int, default=50)
    ap.add_argument("--lines", type=int, default=5000)
    a = ap.parse_args()
    print(machine_line())
    asyncio.run(run(a.reps, a.importers, a.lines))


if __name__ == "__main__":
    main()
