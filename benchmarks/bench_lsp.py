"""Language-server latency through a real client and a real `python -m kina_lsp` process.

A generated 1,000-line file (100 functions of 10 lines); one function is edited
at a time (a shape error toggled on and off).  Reported:

  edit -> publishDiagnostics   wall time from sending didChange to receiving the
                               diagnostics of that version, with the debounce set
                               to 0 (so the figure excludes it)   target: median <= 20 ms
  hover                        request -> response on let names  target: p95 <= 10 ms

Run: .venv/bin/python benchmarks/bench_lsp.py [--edits 60] [--hovers 300]
"""
from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

FUNCTIONS = 100


def make_source(n: int = FUNCTIONS) -> str:
    """n functions of exactly 10 lines each: a chain of 7 lets over a [4, 8] input."""
    out = []
    for i in range(n):
        out.append(f"""fn layer{i}(x: Tensor[F32, [4, 8]], w: Tensor[F32, [8, 8]]) -> Tensor[F32, [4, 8]] {{
  let h0 = x @ w in
  let h1 = h0.tanh() in
  let h2 = h1 + x in
  let h3 = h2.softmax(axis=1) in
  let h4 = h3 * h2 in
  let h5 = h4.reduce_keep(op=sum, axis=1) in
  let h6 = h5.broadcast([4, 8]) in
  h6 - h4
}}""")
    return "\n".join(out) + "\n"


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def run(edits: int, hovers: int) -> dict:
    client = LanguageClient("kina-bench", "0")
    published: dict[int, float] = {}
    arrived = asyncio.Event()

    @client.feature(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def on_diags(params: lsp.PublishDiagnosticsParams):
        published[params.version] = time.perf_counter()
        arrived.set()

    await client.start_io(sys.executable, "-m", "kina_lsp")
    caps = lsp.ClientCapabilities(general=lsp.GeneralClientCapabilities(
        position_encodings=[lsp.PositionEncodingKind.Utf16]))
    await client.initialize_async(lsp.InitializeParams(
        capabilities=caps, initialization_options={"kina": {"diagnostics": {"debounceMs": 0}}}))
    client.initialized(lsp.InitializedParams())

    text = make_source()
    assert text.count("\n") == 10 * FUNCTIONS
    uri = "file:///tmp/bench_lsp.kina"

    async def wait_version(v: int) -> float:
        while v not in published:
            arrived.clear()
            await asyncio.wait_for(arrived.wait(), 30)
        return published[v]

    t0 = time.perf_counter()
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        text_document=lsp.TextDocumentItem(uri=uri, language_id="kina", version=1, text=text)))
    first = await wait_version(1) - t0

    rng = random.Random(0)
    latencies = []
    version = 1
    for _ in range(edits // 2):
        fn = rng.randrange(FUNCTIONS)
        line = 10 * fn + 3            # `  let h2 = h1 + x in`: `x` -> `w` is a shape error
        at = lsp.Range(start=lsp.Position(line=line, character=16), end=lsp.Position(line=line, character=17))
        for new in ("w", "x"):        # break one function, then repair it
            version += 1
            sent = time.perf_counter()
            client.text_document_did_change(lsp.DidChangeTextDocumentParams(
                text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[lsp.TextDocumentContentChangePartial(range=at, text=new)]))
            latencies.append(await wait_version(version) - sent)

    hover_times, answered = [], 0
    for _ in range(hovers):
        fn, k = rng.randrange(FUNCTIONS), rng.randrange(1, 8)
        p = lsp.Position(line=10 * fn + k, character=7)
        t = time.perf_counter()
        h = await client.text_document_hover_async(lsp.HoverParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri), position=p))
        hover_times.append(time.perf_counter() - t)
        answered += h is not None and "Tensor[F32" in h.contents.value

    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return {"open": first, "edit": latencies, "hover": hover_times, "answered": answered}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edits", type=int, default=60)
    ap.add_argument("--hovers", type=int, default=300)
    args = ap.parse_args(argv)
    r = asyncio.run(run(args.edits, args.hovers))
    ms = lambda s: f"{1000 * s:7.2f} ms"  # noqa: E731
    edit, hov = r["edit"], r["hover"]
    print(f"file: {10 * FUNCTIONS} lines, {FUNCTIONS} functions")
    print(f"open -> first diagnostics:        {ms(r['open'])}")
    print(f"edit -> publishDiagnostics ({len(edit)}x): median {ms(statistics.median(edit))}   "
          f"p95 {ms(percentile(edit, 0.95))}   (target median <= 20 ms)")
    print(f"hover ({len(hov)}x):                   median {ms(statistics.median(hov))}   "
          f"p95 {ms(percentile(hov, 0.95))}   (target p95 <= 10 ms); typed answers: {r['answered']}/{len(hov)}")
    ok = statistics.median(edit) <= 0.020 and percentile(hov, 0.95) <= 0.010
    print("targets met" if ok else "targets NOT met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
