"""bench_lsp.py --scale: the language server on big files (issue 31's table).

For each size (lines; 10-line functions from bench_lsp.make_source) a fresh server opens
the file and these are timed through the raw client (bench_lsp.Bench):

  tokens full / range / delta   semantic tokens: the whole file (warm), 60 lines in the
                                middle, and a delta after an edit
  hover after edit              an edit, then at once a hover on a let of another
                                function (answered from the last analysis) and of the
                                edited one (waits for its analysis): typed answers of 20
  completion                    after `x.` typed in a function (what an editor asks)
  edit -> diagnostics           an edit that breaks or repairs one function
  junk line                     folding of a 128,000-character line of junk, and a hover on
                                another document sent meanwhile
  replaced                      a 600,000-character document (semantic tokens asked for, not
                                awaited) replaced by a 10-line one: a hover on the small one
                                (issue 31: work on replaced text is dropped at once)
  server CPU                    the server process's user+system CPU time (from /proc) per
                                warm full request, per edit round (the edit, its two hovers,
                                diagnostics, delta and completion) and for the junk line: the
                                figures that depend least on what else loads the machine

KINA_BENCH_SERVER (see bench_lsp.py) runs another server, e.g. an older checkout's, for a
before/after comparison under the same load.
"""
from __future__ import annotations

import asyncio
import statistics
import time

from bench_lsp import Bench, _pos, make_source

JUNK = "§x" * 64_000


def _ms(xs: list[float]) -> str:
    return f"median {1000 * statistics.median(xs):8.2f} ms   max {1000 * max(xs):8.2f} ms"


async def _timed(b: Bench, method: str, params: dict) -> tuple[float, object]:
    t = time.perf_counter()
    result = await b.request(method, params)
    return time.perf_counter() - t, result


async def one_size(lines: int, reps: int = 20) -> dict[str, object]:
    functions = lines // 10
    b = Bench()
    await b.start()
    uri = f"file:///tmp/bench_lsp_scale_{lines}.kina"
    doc = {"textDocument": {"uri": uri}}
    b.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "kina", "version": 1,
                                                        "text": make_source(functions)}})
    await b.wait_version(1, timeout=600)      # a cold check of 2,000 functions on a loaded machine
    out: dict[str, object] = {"lines": lines}
    first, full = await _timed(b, "textDocument/semanticTokens/full", doc)
    await asyncio.sleep(0.5)                  # the open's background work (importers, warm-up) ends
    cpu0 = b.cpu()
    warm = [(await _timed(b, "textDocument/semanticTokens/full", doc))[0] for _ in range(reps // 2)]
    cpu1 = b.cpu()
    mid = 10 * (functions // 2)
    rng = {"start": _pos(mid, 0), "end": _pos(mid + 60, 0)}
    ranged = [(await _timed(b, "textDocument/semanticTokens/range", {**doc, "range": rng}))[0]
              for _ in range(reps // 2)]
    version, rid = 1, full["resultId"]
    cpu2 = b.cpu()
    delta, edits, hover_other, hover_same, completion = [], [], [], [], []
    typed_other = typed_same = 0
    for k in range(reps):
        fn = (k * 37) % functions
        line = 10 * fn + 3                    # `  let h2 = h1 + x in`: x -> w is a shape error
        version += 1
        sent = b.change(uri, version, [{"range": {"start": _pos(line, 16), "end": _pos(line, 17)},
                                        "text": "w" if k % 2 == 0 else "x"}])
        other = 10 * ((fn + functions // 2) % functions) + 2
        t, h = await _timed(b, "textDocument/hover", {**doc, "position": _pos(other, 7)})
        hover_other.append(t)
        typed_other += h is not None and "Tensor[F32" in h["contents"]["value"]
        t, h = await _timed(b, "textDocument/hover", {**doc, "position": _pos(line - 1, 7)})
        hover_same.append(t)
        typed_same += h is not None and "Tensor[F32" in h["contents"]["value"]
        edits.append(await b.wait_version(version) - sent)
        t, d = await _timed(b, "textDocument/semanticTokens/full/delta", {**doc, "previousResultId": rid})
        delta.append(t)
        rid = d["resultId"]
        t, _ = await _timed(b, "textDocument/completion", {**doc, "position": _pos(line + 1, 15)})
        completion.append(t)
    cpu3 = b.cpu()
    out.update(full_cold=[first], full=warm, range=ranged, delta=delta, hover_other=hover_other,
               hover_same=hover_same, typed=(typed_other, typed_same, reps), completion=completion, edit=edits)
    out["junk"] = await _junk(b, uri)
    cpu4 = b.cpu()
    out["replaced"] = await _replaced(b)
    if None not in (cpu0, cpu1, cpu2, cpu3, cpu4):
        out["cpu"] = ((cpu1 - cpu0) / len(warm), (cpu3 - cpu2) / reps, cpu4 - cpu3)
    out["rss"] = b.rss_mb()
    await b.stop()
    return out


async def _junk(b: Bench, other_uri: str) -> tuple[float, float]:
    """(folding of a 128,000-character junk line, a hover on another document meanwhile)."""
    uri = "file:///tmp/bench_lsp_scale_junk.kina"
    b.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "kina", "version": 1,
                                                        "text": JUNK + "\n"}})
    folds = asyncio.ensure_future(_timed(b, "textDocument/foldingRange", {"textDocument": {"uri": uri}}))
    await asyncio.sleep(0.01)
    hover, _ = await _timed(b, "textDocument/hover", {"textDocument": {"uri": other_uri}, "position": _pos(2, 7)})
    fold, _ = await folds
    return fold, hover


async def _replaced(b: Bench) -> float:
    """A hover on a small document that replaced a 600,000-character one whose semantic
    tokens were asked for just before (the old version's work must not delay it)."""
    uri = "file:///tmp/bench_lsp_scale_replaced.kina"
    big = make_source(600_000 // len(make_source(1)) + 1)
    b.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "kina", "version": 1, "text": big}})
    tokens = asyncio.ensure_future(b.request("textDocument/semanticTokens/full", {"textDocument": {"uri": uri}}))
    await asyncio.sleep(0.01)
    b.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                        "contentChanges": [{"text": make_source(1)}]})
    t, h = await _timed(b, "textDocument/hover", {"textDocument": {"uri": uri}, "position": _pos(2, 7)})
    try:
        await asyncio.wait_for(tokens, 60)
    except Exception:       # ContentModified: the old version's work was dropped
        pass
    return t


def report(r: dict) -> None:
    print(f"-- {r['lines']} lines ({r['lines'] // 10} functions); server RSS {r['rss']:.0f} MB")
    print(f"  semantic tokens full, cold      {1000 * r['full_cold'][0]:8.2f} ms")
    for key, label in (("full", "semantic tokens full (warm)"), ("range", "semantic tokens range, 60 lines"),
                       ("delta", "semantic tokens delta after edit"), ("hover_other", "hover after edit, other fn"),
                       ("hover_same", "hover after edit, edited fn"), ("completion", "completion after edit"),
                       ("edit", "edit -> publishDiagnostics")):
        print(f"  {label:32s} {_ms(r[key])}")
    other, same, n = r["typed"]
    print(f"  hover after edit typed answers: other fn {other}/{n}, edited fn {same}/{n} (null: "
          f"{2 * n - other - same})")
    fold, hover = r["junk"]
    print(f"  128,000-character junk line: folding {1000 * fold:.1f} ms, a hover meanwhile {1000 * hover:.1f} ms")
    print(f"  600,000-character document replaced by 10 lines: a hover on it {1000 * r['replaced']:.1f} ms")
    if "cpu" in r:
        full, edit, junk = r["cpu"]
        print(f"  server CPU: {1000 * full:.1f} ms per warm full request, {1000 * edit:.1f} ms per edit round, "
              f"{1000 * junk:.1f} ms for the junk line")


async def run_scale(sizes: list[int]) -> None:
    for lines in sizes:
        report(await one_size(lines))
