"""A byte-level LSP client for what pytest-lsp cannot express: malformed frames, bad
envelopes, requests out of lifecycle order, exit codes.  It drives a real
`python -m kina_lsp` process over its stdin/stdout; a reader thread splits the
server's output into messages."""
from __future__ import annotations

import itertools
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVER = [sys.executable, "-m", "kina_lsp"]


def frame(msg, header: bytes | None = None) -> bytes:
    body = msg if isinstance(msg, bytes) else json.dumps(msg).encode()
    if header is None:
        header = b"Content-Length: %d\r\n\r\n" % len(body)
    return header + body


class RawServer:
    def __init__(self, cwd: Path | str = ROOT, env: dict | None = None, args=()):
        self.proc = subprocess.Popen(SERVER + list(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, cwd=cwd, env=env)
        self.messages: queue.Queue = queue.Queue()
        self.seen: list[dict] = []        # every message read so far, in order
        self.ids = itertools.count(1000)
        self.stderr = b""
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    # ---- the server's output
    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    self.messages.put(None)
                    return
                if not line.strip():
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            msg = json.loads(out.read(length))
            self.messages.put(msg)

    def _drain_stderr(self) -> None:
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):
            self.stderr += chunk

    def next(self, timeout: float = 20.0) -> dict | None:
        msg = self.messages.get(timeout=timeout)
        if msg is not None:
            self.seen.append(msg)
            if "method" in msg and "id" in msg:   # a request from the server: answer it
                self.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
        return msg

    def response(self, msg_id, timeout: float = 20.0) -> dict:
        """The response with this id (other messages are kept in .seen)."""
        deadline = time.monotonic() + timeout
        while True:
            msg = self.next(max(0.01, deadline - time.monotonic()))
            if msg is None:
                raise AssertionError(f"the server closed its output before answering {msg_id!r}")
            if "method" not in msg and msg.get("id") == msg_id:
                return msg

    def notification(self, method: str, timeout: float = 20.0, where=lambda params: True) -> dict:
        deadline = time.monotonic() + timeout
        for msg in self.seen:
            if msg.get("method") == method and "id" not in msg and where(msg.get("params")):
                return msg
        while True:
            msg = self.next(max(0.01, deadline - time.monotonic()))
            if msg is None:
                raise AssertionError(f"the server closed its output; no {method}")
            if msg.get("method") == method and "id" not in msg and where(msg.get("params")):
                return msg

    # ---- our input
    def send(self, data) -> None:
        self.proc.stdin.write(data if isinstance(data, bytes) else frame(data))
        self.proc.stdin.flush()

    def request(self, method: str, params=None, *, msg_id=None, timeout: float = 20.0) -> dict:
        msg_id = next(self.ids) if msg_id is None else msg_id
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return self.response(msg_id, timeout)

    def notify(self, method: str, params=None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def initialize(self, capabilities=None, options=None) -> dict:
        opts = {"kina": {"diagnostics": {"debounceMs": 0}}}
        opts["kina"].update(options or {})
        reply = self.request("initialize", {"processId": os.getpid(), "rootUri": None,
                                            "capabilities": capabilities or {}, "initializationOptions": opts})
        self.notify("initialized", {})
        return reply

    def open(self, uri: str, text: str, version: int = 1) -> None:
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "kina",
                                                              "version": version, "text": text}})

    def diagnostics(self, uri: str, version: int, timeout: float = 20.0) -> list[dict]:
        msg = self.notification("textDocument/publishDiagnostics", timeout,
                                lambda p: p["uri"] == uri and p.get("version") == version)
        return msg["params"]["diagnostics"]

    def text(self, uri: str) -> str | None:
        reply = self.request("kina/viewFileText", {"textDocument": {"uri": uri}})
        return None if reply["result"] is None else reply["result"]["text"]

    def close(self, timeout: float = 20.0) -> int | None:
        """Close stdin and wait; the exit code, or None if it had to be killed."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        return self.wait(timeout)

    def wait(self, timeout: float = 20.0) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.close(5)


_BREAK = re.compile(r"\r\n|\r|\n")


def lsp_position(text: str, offset: int) -> dict:
    """The LSP position (UTF-16 columns; lines end only at \\n, \\r\\n or \\r) of a
    code-point offset; between the \\r and \\n of a line break it is the end of the line."""
    line, start = 0, 0
    for m in _BREAK.finditer(text, 0, min(len(text), offset + 1)):
        if m.end() > offset:
            break
        line, start = line + 1, m.end()
    col = text[start:offset]
    if col.endswith("\r"):
        col = col[:-1]
    return {"line": line, "character": len(col.encode("utf-16-le", "surrogatepass")) // 2}
