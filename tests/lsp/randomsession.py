"""A random editing session against one document, as JSON-RPC messages: the edits an
editor sends (typed snippets, deletions, multi-change edits, CRLF pastes, line and
paragraph separators, very long lines, whole-document replacements from a few
characters to a large file) with requests of every kind interleaved, not waited for,
some of them cancelled.  The client's own model of the text gives every position.

Used by tests/lsp/test_lsp_sync.py (a bounded session: every request answered exactly
once) and benchmarks/bench_lsp.py --session (the long run, with the server's RSS).
"""
from __future__ import annotations

import asyncio
import bisect
import json
import os
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

_BREAK = re.compile(r"\r\n|\r|\n")
SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]
PIECES = ["(", ")", "{", "}", ".", ",", "let ", " in", "fn ", "=", "\n", "\r", "\r\n", "🙂", "é", "x", "1", " ",
          "// c", "h1", ".exp()", "@", "[", "]", *SEPARATORS]
SNIPPETS = [
    "let y = x.tanh() in\n  ", "x.reduce_keep(op=sum, axis=1)", "Tensor[F32, [4, 8]]", ".softmax(axis=1)",
    "fn g(x: Tensor[F32, [4, 8]]) -> Tensor[F32, [4, 8]] {\n  x.exp()\n}\n", "h0 @ w", "// a comment\n",
    "let z = handle reverseMode(layer0)(x, w) in\n  ",
]
# the kinds of change: typed junk, a snippet, a deletion, a CRLF paste, line/paragraph
# separators, a very long line, the whole document replaced (4 characters to a big file)
KINDS = ["junk", "snippet", "delete", "crlf", "sep", "long", "whole"]
# the request kinds, each with how its params are made from (uri, position, range)
REQUESTS = {
    "textDocument/hover": "position", "textDocument/completion": "position",
    "textDocument/signatureHelp": "position", "textDocument/definition": "position",
    "textDocument/references": "references", "textDocument/prepareRename": "position",
    "textDocument/rename": "rename", "textDocument/documentHighlight": "position",
    "textDocument/documentSymbol": "doc", "textDocument/semanticTokens/full": "doc",
    "textDocument/semanticTokens/full/delta": "delta", "textDocument/semanticTokens/range": "range",
    "textDocument/inlayHint": "range", "textDocument/codeAction": "action", "textDocument/codeLens": "doc",
    "textDocument/foldingRange": "doc", "textDocument/selectionRange": "positions",
    "textDocument/formatting": "format", "textDocument/diagnostic": "doc",
    "textDocument/prepareCallHierarchy": "position", "workspace/symbol": "query", "kina/viewFileText": "doc",
}
# the error codes an answer may carry instead of a result: the request was cancelled,
# the document changed under it, or (rename) the server refused with a reason
ALLOWED_ERRORS = {-32800, -32801, -32802, -32803}


def make_source(n: int) -> str:
    """n functions of 10 lines each (a chain of lets over a [4, 8] input)."""
    return "".join(f"""fn layer{i}(x: Tensor[F32, [4, 8]], w: Tensor[F32, [8, 8]]) -> Tensor[F32, [4, 8]] {{
  let h0 = x @ w in
  let h1 = h0.tanh() in
  let h2 = h1 + x in
  let h3 = h2.softmax(axis=1) in
  let h4 = h3 * h2 in
  let h5 = h4.reduce_keep(op=sum, axis=1) in
  let h6 = h5.broadcast([4, 8]) in
  h6 - h4
}}
""" for i in range(n))


class ClientText:
    """The client's buffer, with LSP positions (lines end at \\n, \\r\\n, \\r; UTF-16 columns)."""

    def __init__(self, text: str) -> None:
        self.set(text)

    def set(self, text: str) -> None:
        self.text = text
        self.starts = [0] + [m.end() for m in _BREAK.finditer(text)]

    def position(self, offset: int) -> dict[str, int]:
        line = bisect.bisect_right(self.starts, offset) - 1
        col = self.text[self.starts[line]:offset].rstrip("\r\n")
        return {"line": line, "character": len(col.encode("utf-16-le", "surrogatepass")) // 2}

    def boundary(self, offset: int) -> int:
        """No position lies between the \\r and \\n of a line break."""
        t = self.text
        return offset - 1 if 0 < offset < len(t) and t[offset - 1] == "\r" and t[offset] == "\n" else offset

    def edit(self, start: int, end: int, new: str) -> dict[str, object]:
        change = {"range": {"start": self.position(start), "end": self.position(end)}, "text": new}
        self.set(self.text[:start] + new + self.text[end:])
        return change


@dataclass
class Scale:
    """How big the session's documents get (the test keeps them small enough to run fast)."""
    long_line: int = 250_000     # characters of the longest pasted line
    big_doc: int = 600_000       # characters of the largest whole-document replacement
    base_functions: int = 100    # the document the session starts from


TEST_SCALE = Scale(long_line=20_000, big_doc=40_000, base_functions=20)


class Session:
    """Yields the session's messages (dicts without "jsonrpc"): notifications and requests."""

    def __init__(self, uri: str, seed: int, scale: Scale | None = None) -> None:
        self.uri, self.rng, self.scale = uri, random.Random(seed), scale or Scale()
        self.base = make_source(self.scale.base_functions)
        self.model = ClientText(self.base)
        self.version = 1
        self.next_id = 1
        self.open_ids: list[int] = []      # requests sent (candidates for $/cancelRequest)
        self.kinds: Counter[str] = Counter()   # the kinds of changes made, and "multi" edits
        self.sizes: list[int] = []             # the document's length after each edit

    def open(self) -> dict[str, object]:
        return {"method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": self.uri, "languageId": "kina", "version": 1, "text": self.model.text}}}

    # ---- edits
    def _span(self, longest: int) -> tuple[int, int]:
        m = self.model
        start = m.boundary(self.rng.randrange(len(m.text) + 1))
        end = m.boundary(min(len(m.text), start + self.rng.randrange(longest + 1)))
        return start, max(start, end)

    def _one_change(self) -> dict[str, object]:
        rng, m = self.rng, self.model
        kind = rng.choices(KINDS, [40, 20, 15, 8, 8, 3, 2])[0]
        self.kinds[kind] += 1
        if kind == "whole":       # a revert, a paste over everything: from a few characters to a big file
            size = rng.choice([4, 50, len(self.base), self.scale.big_doc])
            text = (self.base * (1 + size // max(1, len(self.base))))[:size] if size > 50 else self.base[:size]
            m.set(text)
            return {"text": text}
        if kind == "delete":
            start, end = self._span(rng.choice([1, 10, 200, 5000]))
            return m.edit(start, end, "")
        start, end = self._span(rng.choice([0, 0, 1, 5, 20]))
        if kind == "junk":
            new = "".join(rng.choice(PIECES) for _ in range(rng.choice([0, 1, 1, 2, 3])))
        elif kind == "snippet":
            new = rng.choice(SNIPPETS)
        elif kind == "crlf":      # a paste from a Windows file
            new = rng.choice(SNIPPETS).replace("\n", "\r\n") + "\r\n" + rng.choice(SNIPPETS).replace("\n", "\r\n")
        elif kind == "sep":
            new = rng.choice(SEPARATORS[:2]) + rng.choice(PIECES) + rng.choice(SEPARATORS)
        else:                     # one very long line
            new = "// " + "x" * rng.randrange(self.scale.long_line // 2, self.scale.long_line) + "\n"
        return m.edit(start, end, new)

    def edit(self) -> dict[str, object]:
        """A didChange of one to three changes (applied in order, as LSP says)."""
        self.version += 1
        changes = [self._one_change() for _ in range(self.rng.choice([1, 1, 1, 2, 3]))]
        self.kinds["multi"] += len(changes) > 1
        self.sizes.append(len(self.model.text))
        return {"method": "textDocument/didChange", "params": {
            "textDocument": {"uri": self.uri, "version": self.version}, "contentChanges": changes}}

    # ---- requests
    def request(self, method: str | None = None) -> dict[str, object]:
        rng, m = self.rng, self.model
        method = method or rng.choice(list(REQUESTS))
        doc = {"textDocument": {"uri": self.uri}}
        p = m.position(m.boundary(rng.randrange(len(m.text) + 1)))
        q = m.position(m.boundary(rng.randrange(len(m.text) + 1)))
        a, b = sorted([p, q], key=lambda x: (x["line"], x["character"]))
        shape = REQUESTS[method]
        params: dict[str, object] = {
            "doc": doc, "position": {**doc, "position": p}, "positions": {**doc, "positions": [p, q]},
            "references": {**doc, "position": p, "context": {"includeDeclaration": True}},
            "rename": {**doc, "position": p, "newName": rng.choice(["y", "h9", "renamed"])},
            "delta": {**doc, "previousResultId": str(rng.randrange(1, 50))},
            "range": {**doc, "range": {"start": a, "end": b}},
            "action": {**doc, "range": {"start": a, "end": b}, "context": {"diagnostics": []}},
            "format": {**doc, "options": {"tabSize": 2, "insertSpaces": True}},
            "query": {"query": rng.choice(["", "layer", "h"])},
        }[shape]
        msg_id = self.next_id
        self.next_id += 1
        self.open_ids.append(msg_id)
        return {"id": msg_id, "method": method, "params": params}

    def cancel(self) -> dict[str, object] | None:
        """$/cancelRequest for one of the recent requests (answered or not, as editors do)."""
        if not self.open_ids:
            return None
        msg_id = self.rng.choice(self.open_ids[-8:])
        return {"method": "$/cancelRequest", "params": {"id": msg_id}}

    def steps(self, edits: int, requests_per_edit: float = 0.6) -> Iterator[dict[str, object]]:
        """`edits` didChanges with requests (about requests_per_edit of them per edit) and
        a few cancellations in between."""
        for _ in range(edits):
            yield self.edit()
            while self.rng.random() < requests_per_edit / (1 + requests_per_edit):
                yield self.request()
                if self.rng.random() < 0.1 and (c := self.cancel()) is not None:
                    yield c


def check_answers(sent: list[object], answers: dict[object, list[dict]]) -> list[str]:
    """What is wrong with the answers: a request without one, or with more than one, or
    with an error other than cancelled / content modified / server cancelled (or without
    a message).  Empty when every request got exactly one good answer."""
    problems = []
    for msg_id in sent:
        got = answers.get(msg_id, [])
        if len(got) != 1:
            problems.append(f"request {msg_id}: {len(got)} answers")
            continue
        err = got[0].get("error")
        if err is not None and (err.get("code") not in ALLOWED_ERRORS or not err.get("message")):
            problems.append(f"request {msg_id}: error {err}")
    problems += [f"an answer to {i!r}, which was never sent" for i in answers if i not in set(sent)]
    return problems


# ---- a raw JSON-RPC client that records every answer -----------------------------------------
@dataclass
class Client:
    """Frames in and out of a `python -m kina_lsp` process; every answer kept, by id."""
    proc: asyncio.subprocess.Process
    answers: dict[object, list[dict]] = field(default_factory=dict)
    sent: list[object] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    # request id -> (method, seconds from sending to its (first) answer)
    latency: dict[object, tuple[str, float]] = field(default_factory=dict)
    _sent_at: dict[object, tuple[str, float]] = field(default_factory=dict)

    @classmethod
    async def start(cls, cmd: list[str] | None = None, env: dict[str, str] | None = None,
                    stderr: object = asyncio.subprocess.DEVNULL) -> Client:
        """stderr: where the server's log goes (a file, or DEVNULL)."""
        proc = await asyncio.create_subprocess_exec(*(cmd or [sys.executable, "-m", "kina_lsp"]),
                                                    stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                    stderr=stderr, limit=1 << 26, env=env)
        client = cls(proc)
        client.reader = asyncio.ensure_future(client._read())
        await client.call("initialize", {
            "processId": os.getpid(), "rootUri": None, "capabilities": {"general": {"positionEncodings": ["utf-16"]}},
            "initializationOptions": {"kina": {"diagnostics": {"debounceMs": 0}}}}, msg_id="init")
        client.write({"method": "initialized", "params": {}})
        return client

    async def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = 0
            while (line := await out.readline()).strip():
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            if not line:
                return
            msg = json.loads(await out.readexactly(length))
            if "method" in msg:
                if "id" in msg:   # a request of the server's (configuration, refresh): answer it
                    self.write({"id": msg["id"], "result": None})
                continue
            self.answers.setdefault(msg.get("id"), []).append(msg)
            if (sent := self._sent_at.pop(msg.get("id"), None)) is not None:
                self.latency[msg.get("id")] = (sent[0], time.perf_counter() - sent[1])
            self.arrived.set()

    def write(self, msg: dict[str, object]) -> None:
        assert self.proc.stdin is not None
        body = json.dumps({"jsonrpc": "2.0", **msg}).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def send(self, msg: dict[str, object]) -> None:
        if "id" in msg:
            self.sent.append(msg["id"])
            self._sent_at[msg["id"]] = (str(msg["method"]), time.perf_counter())
        self.write(msg)

    async def wait_answers(self, ids: list[object], timeout: float) -> None:
        """Until every one of `ids` has an answer (or timeout: check_answers reports it)."""
        assert self.proc.stdin is not None
        await self.proc.stdin.drain()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while any(i not in self.answers for i in ids) and loop.time() < deadline:
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), max(0.01, deadline - loop.time()))
            except TimeoutError:
                break

    async def call(self, method: str, params: object, msg_id: object) -> dict:
        self.send({"id": msg_id, "method": method, "params": params})
        await self.wait_answers([msg_id], 120)
        return self.answers[msg_id][-1]

    async def stop(self) -> int:
        await self.call("shutdown", None, "shutdown")
        self.write({"method": "exit"})
        code = await self.proc.wait()
        self.reader.cancel()
        return code

    def rss_mb(self) -> float | None:
        """The server's resident memory (from /proc; None elsewhere)."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
            return kb / 1024
        except (OSError, StopIteration, ValueError):
            return None


async def run_session(client: Client, session: Session, edits: int, pause_every: int = 50,
                      timeout: float = 120) -> list[str]:
    """Send the session; every `pause_every` edits (a pause in typing) wait for the answers
    so far and compare the server's text with the client's.  The problems found
    (check_answers, and any text that differs)."""
    client.send(session.open())
    problems: list[str] = []
    done = 0
    for msg in session.steps(edits):
        client.send(msg)
        done += msg["method"] == "textDocument/didChange"
        if msg["method"] == "textDocument/didChange" and done % pause_every == 0:
            problems += await _pause(client, session, f"text{done}", timeout)
    problems += await _pause(client, session, "text-end", timeout)
    return problems + check_answers(client.sent, client.answers)


async def _pause(client: Client, session: Session, msg_id: str, timeout: float) -> list[str]:
    await client.wait_answers(list(client.sent), timeout)
    reply = await client.call("kina/viewFileText", {"textDocument": {"uri": session.uri}}, msg_id)
    text = (reply.get("result") or {}).get("text")
    return [] if text == session.model.text else [f"{msg_id}: the server's text differs from the client's"]
