"""Language-server latency through a real client and a real `python -m kina_lsp` process.

A generated 1,000-line file (100 functions of 10 lines), diagnostics debounce 0 (so the
figures exclude it), UTF-16 positions, push diagnostics.  Three parts:

  toggle   one function at a time gets a shape error and loses it again (the edit a
           user makes most):  edit -> publishDiagnostics        target: median <= 20 ms
  hover    request -> response on let names, analysis done      target: p95 <= 10 ms
  random   --random random edits (default 2,000) of junk with line-separator characters
           (U+2028, U+2029, U+0085, VT, FF, FS..RS, \\r, \\r\\n) anywhere in the file; right
           after each edit (before its diagnostics) one request of a random kind (hover,
           completion, signature help, document symbols, inlay hints, semantic tokens,
           definition); both are timed:
             edit -> publishDiagnostics                         target: median <= 20 ms
             every request                                      target: max <= 100 ms
           and every --check edits the server's text (kina/viewFileText) must equal the
           client's.  --restore N sends the generated file again every N edits (a revert:
           every function changed since is checked again, like opening the file).
  CPU      the server process's user+system CPU time per edit (from /proc): the figure
           that depends least on what else loads the machine.
  RSS      the server's resident memory at the end (from /proc).
  session  --session N (default 0: skip): a second server gets the long random session of
           tests/lsp/randomsession.py: N edits (snippets, deletions, multi-change edits,
           CRLF pastes, U+2028, lines of up to 250,000 characters, whole documents of 4 to
           600,000 characters) with requests of every kind interleaved and not waited for,
           some cancelled.  Every request must get exactly one answer (a result, or
           cancelled / content modified / server cancelled), the server's text must equal
           the client's at every pause, and its RSS is printed: at the start, the peak,
           after the session, and after the document shrank to 4 characters
                                                                target: under 300 MB

  scale    --scale 1000,5000,20000: only the big-file figures of issue 31 (lsp_scale.py):
           semantic tokens full / range / delta, hover right after an edit, completion,
           edit -> diagnostics, and a 128,000-character junk line being folded

Run: .venv/bin/python benchmarks/bench_lsp.py [--edits 60] [--hovers 300] [--random 2000] [--session 5000]
     .venv/bin/python benchmarks/bench_lsp.py --scale 1000,5000,20000
Prints the figures and whether the targets were met (record `uptime` with them: the
machine is shared).
"""
from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import random
import re
import statistics
import sys
import time

FUNCTIONS = 100
SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]
PIECES = ["(", ")", "{", "}", ".", ",", "let ", " in", "=", "\n", "\r", "\r\n", "é", "🙂", "x", "1", " ",
          "// c", "h1", ".exp()", *SEPARATORS]
_BREAK = re.compile(r"\r\n|\r|\n")


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


# ---- the client's own model of the text (LSP lines: \n, \r\n, \r) ----------------------------
class ClientText:
    def __init__(self, text: str):
        self.set(text)

    def set(self, text: str) -> None:
        self.text = text
        self.starts = [0] + [m.end() for m in _BREAK.finditer(text)]

    def position(self, offset: int) -> dict:
        line = bisect.bisect_right(self.starts, offset) - 1
        col = self.text[self.starts[line]:offset].rstrip("\r\n")
        return _pos(line, len(col.encode("utf-16-le", "surrogatepass")) // 2)

    def boundary(self, offset: int) -> int:
        """No position lies between the \\r and \\n of a line break."""
        t = self.text
        return offset - 1 if 0 < offset < len(t) and t[offset - 1] == "\r" and t[offset] == "\n" else offset

    def edit(self, start: int, end: int, new: str) -> dict:
        change = {"range": {"start": self.position(start), "end": self.position(end)}, "text": new}
        self.set(self.text[:start] + new + self.text[end:])
        return change


class Bench:
    """A minimal JSON-RPC client over the server's stdio: frames in and out, json.loads
    and nothing else, as an editor's client does (VS Code parses with JSON.parse).  A
    Python LSP client that structures every answer into lsprotocol objects would add its
    own milliseconds (tens for a thousand document symbols) to every figure."""

    def __init__(self):
        self.published: dict[int, float] = {}
        self.arrived = asyncio.Event()
        self.pending: dict[int, asyncio.Future] = {}
        self.ids = iter(range(1, 1 << 30))

    async def start(self) -> None:
        cmd = os.environ.get("KINA_BENCH_SERVER", f"{sys.executable} -m kina_lsp").split()
        self.proc = await asyncio.create_subprocess_exec(*cmd, stdin=asyncio.subprocess.PIPE,
                                                         stdout=asyncio.subprocess.PIPE, limit=1 << 26)
        self.reader = asyncio.ensure_future(self._read())
        await self.request("initialize", {
            "processId": os.getpid(), "rootUri": None,
            "capabilities": {"general": {"positionEncodings": ["utf-16"]}},
            "initializationOptions": {"kina": {"diagnostics": {"debounceMs": 0}}}})
        self.notify("initialized", {})

    async def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = await out.readline()
                if not line:
                    return
                if not line.strip():
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            self._dispatch(json.loads(await out.readexactly(length)))

    def _dispatch(self, msg: dict) -> None:
        """One message from the server: a diagnostics notification, a request of the
        server's (configuration: answered), or the reply to one of ours."""
        if "method" in msg:
            if msg["method"] == "textDocument/publishDiagnostics":
                self._published(msg["params"])
                self.arrived.set()
            elif "id" in msg:
                self._write({"jsonrpc": "2.0", "id": msg["id"], "result": None})
        elif msg.get("id") in self.pending:
            self.pending.pop(msg["id"]).set_result(msg)

    def _published(self, params: dict) -> None:
        self.published[params["version"]] = time.perf_counter()

    def _write(self, msg: dict) -> None:
        body = json.dumps(msg).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def notify(self, method: str, params) -> None:
        self._write({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params):
        msg_id = next(self.ids)
        fut = self.pending[msg_id] = asyncio.get_running_loop().create_future()
        self._write({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        reply = await asyncio.wait_for(fut, 120)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result")

    async def stop(self) -> None:
        await self.request("shutdown", None)
        self.notify("exit", None)
        await self.proc.wait()
        self.reader.cancel()

    def rss_mb(self) -> float | None:
        """The server's resident memory in MB (from /proc; None elsewhere)."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024
        except (OSError, StopIteration, ValueError):
            return None

    def cpu(self) -> float | None:
        """CPU seconds the server process has used (user + system), from /proc; None elsewhere.
        Unlike wall-clock latencies this hardly depends on what else loads the machine."""
        try:
            fields = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    async def wait_version(self, v: int, timeout: float = 60) -> float:
        while v not in self.published:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), timeout)
        return self.published[v]

    def change(self, uri: str, version: int, changes: list[dict]) -> float:
        sent = time.perf_counter()
        self.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                               "contentChanges": changes})
        return sent


def _pos(line: int, character: int) -> dict:
    return {"line": line, "character": character}


async def toggle_and_hover(b: Bench, uri: str, edits: int, hovers: int) -> dict:
    rng = random.Random(0)
    latencies, version = [], 1
    for _ in range(edits // 2):
        fn = rng.randrange(FUNCTIONS)
        line = 10 * fn + 3            # `  let h2 = h1 + x in`: `x` -> `w` is a shape error
        at = {"start": _pos(line, 16), "end": _pos(line, 17)}
        for new in ("w", "x"):        # break one function, then repair it
            version += 1
            sent = b.change(uri, version, [{"range": at, "text": new}])
            latencies.append(await b.wait_version(version) - sent)
    hover_times, answered = [], 0
    for _ in range(hovers):
        fn, k = rng.randrange(FUNCTIONS), rng.randrange(1, 8)
        t = time.perf_counter()
        h = await b.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": _pos(10 * fn + k, 7)})
        hover_times.append(time.perf_counter() - t)
        answered += h is not None and "Tensor[F32" in h["contents"]["value"]
    return {"edit": latencies, "hover": hover_times, "answered": answered, "version": version}


KINDS = {
    "hover": "textDocument/hover", "completion": "textDocument/completion",
    "signatureHelp": "textDocument/signatureHelp", "documentSymbol": "textDocument/documentSymbol",
    "inlayHint": "textDocument/inlayHint", "semanticTokens": "textDocument/semanticTokens/full",
    "definition": "textDocument/definition",
}


def _params(kind: str, uri: str, p: dict) -> dict:
    doc = {"textDocument": {"uri": uri}}
    if kind in ("documentSymbol", "semanticTokens"):
        return doc
    if kind == "inlayHint":   # what an editor asks for: the visible screen, about 50 lines
        return {**doc, "range": {"start": _pos(max(0, p["line"] - 25), 0), "end": _pos(p["line"] + 25, 0)}}
    return {**doc, "position": p}


async def random_edits(b: Bench, uri: str, text: str, version: int, n: int, check: int, restore: int,
                       kinds: list[str]) -> dict:
    rng = random.Random(1)
    model = ClientText(text)
    diag_times, req_times = [], {k: [] for k in kinds}
    checks = mismatches = 0
    slowest: list[tuple] = []       # (seconds, edit number, request kind, inserted text)
    for i in range(n):
        version += 1
        if restore and i % restore == restore - 1:
            model.set(text)
            changes = [{"text": text}]
        else:
            t = model.text
            start = model.boundary(rng.randrange(len(t) + 1))
            end = max(start, model.boundary(min(len(t), start + rng.choice([0, 0, 1, 2, 5, 20]))))
            new = "".join(rng.choice(PIECES) for _ in range(rng.choice([0, 1, 1, 2, 3])))
            changes = [model.edit(start, end, new)]
        sent = b.change(uri, version, changes)
        kind = rng.choice(kinds)
        p = model.position(rng.randrange(len(model.text) + 1))
        t0 = time.perf_counter()
        await b.request(KINDS[kind], _params(kind, uri, p))
        req_times[kind].append(time.perf_counter() - t0)
        slowest.append((req_times[kind][-1], i, kind, repr(changes[0]["text"])[:40]))
        slowest.sort(reverse=True)
        del slowest[5:]
        diag_times.append(await b.wait_version(version) - sent)
        if i % check == check - 1 or i == n - 1:
            reply = await b.request("kina/viewFileText", {"textDocument": {"uri": uri}})
            checks += 1
            mismatches += reply["text"] != model.text
    return {"diag": diag_times, "requests": req_times, "checks": checks, "mismatches": mismatches,
            "slowest": slowest}


async def session_part(n: int, seed: int) -> dict:
    """The long random session (see the module docstring) on a server of its own."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lsp"))
    import randomsession as rs
    cmd = os.environ.get("KINA_BENCH_SERVER", f"{sys.executable} -m kina_lsp").split()
    client = await rs.Client.start(cmd)
    rss = {"start": client.rss_mb()}
    peak = [0.0]

    async def sample() -> None:
        while True:
            peak[0] = max(peak[0], client.rss_mb() or 0.0)
            await asyncio.sleep(0.25)
    sampler = asyncio.ensure_future(sample())
    session = rs.Session("file:///tmp/bench_lsp_session.kina", seed)
    t0 = time.perf_counter()
    problems = await rs.run_session(client, session, n)
    seconds = time.perf_counter() - t0
    sampler.cancel()
    rss["peak"], rss["end"] = max(peak[0], client.rss_mb() or 0.0), client.rss_mb()
    session.version += 1          # the document shrinks to 4 characters: what stays is the caches
    session.model.set("fn f")
    client.send({"method": "textDocument/didChange", "params": {
        "textDocument": {"uri": session.uri, "version": session.version}, "contentChanges": [{"text": "fn f"}]}})
    # what an editor asks for after an edit (the semantic-token cache trims itself then)
    await client.call("textDocument/semanticTokens/full", {"textDocument": {"uri": session.uri}}, "tokens")
    await asyncio.sleep(1.0)
    stats = await client.call("kina/serverStats", None, "stats")
    rss["shrunk"] = client.rss_mb()
    await client.stop()
    return {"edits": n, "requests": len(client.sent), "problems": problems, "rss": rss, "seconds": seconds,
            "stats": stats.get("result")}


async def run(args) -> dict:
    b = Bench()
    await b.start()
    text = make_source()
    assert text.count("\n") == 10 * FUNCTIONS
    uri = "file:///tmp/bench_lsp.kina"
    t0 = time.perf_counter()
    b.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "kina", "version": 1, "text": text}})
    first = await b.wait_version(1) - t0
    cpu0 = b.cpu()
    part1 = await toggle_and_hover(b, uri, args.edits, args.hovers)
    cpu1 = b.cpu()
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise SystemExit(f"unknown --kinds {sorted(unknown)}; choose from {list(KINDS)}")
    part2 = await random_edits(b, uri, text, part1["version"], args.random, args.check, args.restore, kinds) \
        if args.random else None
    cpu2 = b.cpu()
    rss = b.rss_mb()
    await b.stop()
    cpu = None if None in (cpu0, cpu1, cpu2) else (cpu1 - cpu0, cpu2 - cpu1)
    session = await session_part(args.session, args.seed) if args.session else None
    return {"open": first, **part1, "random": part2, "cpu": cpu, "rss": rss, "session": session}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edits", type=int, default=60)
    ap.add_argument("--hovers", type=int, default=300)
    ap.add_argument("--random", type=int, default=2000, help="random edits with line separators (0: skip)")
    ap.add_argument("--check", type=int, default=50, help="compare the server's text every N random edits")
    ap.add_argument("--restore", type=int, default=0,
                    help="send the generated file again every N edits, a revert (default 0: never)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="request kinds sent after the random edits")
    ap.add_argument("--session", type=int, default=0,
                    help="edits of the long random session, with the server's RSS (0: skip; the figure is 5000)")
    ap.add_argument("--seed", type=int, default=1, help="the long session's random seed")
    ap.add_argument("--scale", default="", help="only the big-file figures (lsp_scale.py) at these line "
                                                "counts, e.g. 1000,5000,20000")
    args = ap.parse_args(argv)
    if args.scale:
        from lsp_scale import run_scale
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        asyncio.run(run_scale([int(n) for n in args.scale.split(",")]))
        return 0
    r = asyncio.run(run(args))
    ms = lambda s: f"{1000 * s:7.2f} ms"  # noqa: E731
    edit, hov = r["edit"], r["hover"]
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"file: {10 * FUNCTIONS} lines, {FUNCTIONS} functions")
    print(f"open -> first diagnostics:        {ms(r['open'])}")
    print(f"toggle: edit -> publishDiagnostics ({len(edit)}x): median {ms(statistics.median(edit))}   "
          f"p95 {ms(percentile(edit, 0.95))}   (target median <= 20 ms)")
    print(f"hover ({len(hov)}x):                   median {ms(statistics.median(hov))}   "
          f"p95 {ms(percentile(hov, 0.95))}   (target p95 <= 10 ms); typed answers: {r['answered']}/{len(hov)}")
    if r["cpu"]:
        print(f"server CPU (user+sys): toggle+hover {ms(r['cpu'][0] / max(1, len(edit)))} per edit incl. hovers")
    ok = statistics.median(edit) <= 0.020 and percentile(hov, 0.95) <= 0.010
    rr = r["random"]
    if rr is not None:
        d = rr["diag"]
        every = [t for ts in rr["requests"].values() for t in ts]
        print(f"random: {len(d)} edits with line-separator characters, a request right after each")
        print(f"  edit -> publishDiagnostics: median {ms(statistics.median(d))}   p95 {ms(percentile(d, 0.95))}   "
              f"max {ms(max(d))}   (target median <= 20 ms)")
        for kind, ts in rr["requests"].items():
            if ts:
                print(f"  {kind:15s} ({len(ts):4d}x): median {ms(statistics.median(ts))}   "
                      f"p95 {ms(percentile(ts, 0.95))}   max {ms(max(ts))}")
        over = sum(t > 0.100 for t in every)
        print(f"  every request ({len(every)}x): p99 {ms(percentile(every, 0.99))}   max {ms(max(every))}   "
              f"over 100 ms: {over}   (target max <= 100 ms)")
        if r["cpu"]:
            print(f"  server CPU (user+sys) per edit and its request: {ms(r['cpu'][1] / len(d))}")
        print(f"  server text == client text: {rr['checks'] - rr['mismatches']}/{rr['checks']} checkpoints")
        print("  slowest requests: " + "; ".join(f"{1000 * t:.0f} ms {kind} after edit {i} ({text})"
                                                 for t, i, kind, text in rr["slowest"]))
        ok = ok and statistics.median(d) <= 0.020 and max(every) <= 0.100 and rr["mismatches"] == 0
    if r["rss"] is not None:
        print(f"server RSS at the end: {r['rss']:.0f} MB")
    if r["session"] is not None:
        ok = _print_session(r["session"]) and ok
    print("targets met" if ok else "targets NOT met")
    return 0


def _print_session(s: dict) -> bool:
    rss = s["rss"]
    mb = lambda x: "?" if x is None else f"{x:.0f} MB"  # noqa: E731
    print(f"session: {s['edits']} random edits, {s['requests']} requests, {s['seconds']:.0f} s")
    print(f"  every request answered exactly once, texts equal at every pause: "
          f"{'yes' if not s['problems'] else 'NO: ' + '; '.join(s['problems'][:5])}")
    print(f"  server RSS: start {mb(rss['start'])}   peak {mb(rss['peak'])}   after the session {mb(rss['end'])}   "
          f"after the document shrank to 4 characters {mb(rss['shrunk'])}   (target under 300 MB)")
    print(f"  server caches after the shrink: {json.dumps(s['stats'])}")
    return not s["problems"] and rss["end"] is not None and rss["end"] < 300 and (rss["shrunk"] or 0) < 300


if __name__ == "__main__":
    raise SystemExit(main())
