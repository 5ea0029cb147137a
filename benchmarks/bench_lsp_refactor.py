"""What listing the refactor code actions costs (kina_lsp/features/refactor*.py): for a cursor
or selection in a file, finding the candidates, and re-checking each candidate's edited text
(refactor_check: the analysis of the edited copy, which re-checks only the functions the
edit changed, plus the file's reverseMode checks).  CPU ms per request, median over repeats
(the check cache is cleared between repeats: every figure is a first request at that spot).

    .venv/bin/python benchmarks/bench_lsp_refactor.py [--repeats N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from compiler.analysis import analyze  # noqa: E402
from compiler.core.diagnostics import Span  # noqa: E402
from kina_lsp.convert import index_of  # noqa: E402
from kina_lsp.documents import View  # noqa: E402
from kina_lsp.features import refactor  # noqa: E402


def spots() -> list[tuple[str, str, str, int, int]]:
    """(label, path, text, selection start, end)."""
    from bench_lsp import make_source
    out = []
    layers = (ROOT / "examples/layers.kina").read_text(encoding="utf-8")
    at = layers.index("iota(shape=[B, T], axis=1)")
    out.append(("layers.kina: extract (imports, handled)", "examples/layers.kina", layers, at, at + 26))
    at = layers.index("let wte_t") + 5
    out.append(("layers.kina: inline, refused by reverseMode", "examples/layers.kina", layers, at, at))
    block = (ROOT / "examples/decoder_block.kina").read_text(encoding="utf-8")
    at = block.index("ge(query, key).reshape")
    out.append(("decoder_block.kina: split a chain", "examples/decoder_block.kina", block, at, at))
    big = make_source()
    at = big.rindex("let ") + 4
    out.append((f"bench_lsp source ({big.count(chr(10))} lines): inline", "big.kina", big, at, at))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"cores {len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.2f}")
    for label, path, text, start, end in spots():
        view = View(analyze(text, str(ROOT / path)), text, index_of(text))
        find, check, offered = [], [], []
        for _ in range(args.repeats):
            refactor._CHECKED.clear()
            t0 = time.process_time()
            found = refactor.candidates(view, Span(start, end), [], None)
            t1 = time.process_time()
            good = refactor.verified(view, found)
            t2 = time.process_time()
            find.append((t1 - t0) * 1000)
            check.append((t2 - t1) * 1000)
            offered = [c[2].title for c in good]
        print(f"{label}: {len(found)} candidate(s), find {statistics.median(find):.1f} ms, "
              f"re-check {statistics.median(check):.1f} ms CPU; offered {offered}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
