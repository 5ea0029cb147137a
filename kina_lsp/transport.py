"""The wire: LSP base-protocol frames in, JSON-RPC messages checked, then handed to pygls.

pygls' own reader (pygls.io_.run_async) accepts only a header spelled exactly
`Content-Length: N\\r\\n`, drops every message it cannot structure without an
answer, and ignores requests after `shutdown` silently.  A client that got any
of that wrong saw a server that kept running but never answered again.  This
module replaces the reader and the envelope checks; pygls still structures the
messages and runs the handlers.

Framing (the LSP base protocol): header lines up to an empty line, header names
case-insensitive, any whitespace around values, `\\r\\n` or a bare `\\n` line
end.  A header block without a usable Content-Length is skipped (there is no id
to answer).  Junk in front of a header (the rest of a frame whose length was
too short) is skipped up to the next `Content-Length:`.

Messages (JSON-RPC 2.0 and the LSP lifecycle), every request gets one answer:

  invalid JSON or bytes                    -32700 ParseError, id null
  not an object, no/other `jsonrpc`,
  bad `id` or `method`                     -32600 InvalidRequest
  params that do not fit the method        -32602 InvalidParams (what and where, no traceback)
  a request before `initialize`            -32002 ServerNotInitialized
  a second `initialize`                    -32600 InvalidRequest
  a request after `shutdown`               -32600 InvalidRequest
  a request still open at `exit` or at
  the end of input                         -32802 ServerCancelled (protocol.py keeps the ledger)
  `exit`                                   ends the loop: exit code 0 after `shutdown`, else 1

Notifications that break a rule are logged and dropped (they have no id).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeGuard

import cattrs
from pygls.protocol import JsonRPCProtocol

log = logging.getLogger(__name__)

MAX_HEADER_LINE = 64 * 1024          # a header line longer than this is junk
MAX_BODY = 256 * 1024 * 1024         # a larger body is skipped and refused

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
SERVER_NOT_INITIALIZED = -32002


# A JSON-RPC message as decoded from the wire (checked by _envelope_problem before use).
Message = dict[str, object]


# ---- byte sources -----------------------------------------------------------------------
class ByteSource(Protocol):
    async def read(self, n: int) -> bytes:
        """Up to n bytes; b"" at end of input."""
        ...


class ThreadedFileSource:
    """Reads a file descriptor (stdin) on a thread of its own, so a blocking read never
    holds the event loop and no handler's thread pool can starve the reader.  The
    queue is bounded: a client that floods the server is slowed down, not buffered."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._queue: asyncio.Queue[bytes] | None = None

    def _pump(self, loop: asyncio.AbstractEventLoop) -> None:
        while True:
            try:
                data = os.read(self.fd, FrameReader.CHUNK)
            except OSError:
                data = b""
            try:
                assert self._queue is not None   # made by the loop before the pump starts
                asyncio.run_coroutine_threadsafe(self._queue.put(data), loop).result()
            except Exception:   # the loop is gone: the server is exiting
                return
            if not data:
                return

    async def read(self, n: int) -> bytes:
        if self._queue is None:
            self._queue = asyncio.Queue(maxsize=16)
            loop = asyncio.get_running_loop()
            threading.Thread(target=self._pump, args=(loop,), name="kina-stdin", daemon=True).start()
        return await self._queue.get()


class StreamSource:
    """An asyncio StreamReader (a TCP connection)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    async def read(self, n: int) -> bytes:
        try:
            return await self.reader.read(n)
        except (ConnectionError, OSError):
            return b""


# ---- framing ------------------------------------------------------------------------------
@dataclass
class Frame:
    body: bytes | None          # None: the body was too large and was skipped
    length: int


class FrameReader:
    """Yields frame bodies from a byte source; None at end of input."""

    CHUNK = 64 * 1024

    def __init__(self, source: ByteSource) -> None:
        self.source = source
        self.buf = bytearray()
        self.eof = False

    async def _fill(self) -> bool:
        if self.eof:
            return False
        data = await self.source.read(self.CHUNK)
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    async def _line(self) -> bytes | None:
        """One line with its terminator (at most MAX_HEADER_LINE bytes); None at EOF."""
        start = 0
        while True:
            i = self.buf.find(b"\n", start)
            if i >= 0:
                line = bytes(self.buf[:i + 1])
                del self.buf[:i + 1]
                return line
            if len(self.buf) >= MAX_HEADER_LINE:
                line = bytes(self.buf)   # an absurd header line: hand it back as junk
                self.buf.clear()
                return line
            start = len(self.buf)
            if not await self._fill():
                if self.buf:
                    line = bytes(self.buf)
                    self.buf.clear()
                    return line
                return None

    async def _exactly(self, n: int) -> bytes | None:
        while len(self.buf) < n:
            if not await self._fill():
                return None
        body = bytes(self.buf[:n])
        del self.buf[:n]
        return body

    async def _skip(self, n: int) -> bool:
        while n > 0:
            if not self.buf and not await self._fill():
                return False
            take = min(n, len(self.buf))
            del self.buf[:take]
            n -= take
        return True

    async def next(self) -> Frame | None:
        length = None
        while True:
            line = await self._line()
            if line is None:
                return None
            if not line.strip():
                if length is not None:
                    break
                continue          # blank lines between frames, or a header block without a length
            value = _content_length(line)
            if value is not None:
                length = value
            elif b":" not in line:
                log.warning("skipping junk before a frame header: %r", line[:80])
        if length > MAX_BODY:
            log.error("a %d-byte message is over the %d-byte limit; skipped", length, MAX_BODY)
            return Frame(None, length) if await self._skip(length) else None
        body = await self._exactly(length)
        return None if body is None else Frame(body, length)


def _content_length(line: bytes) -> int | None:
    """The value of a Content-Length header in this line (case-insensitive, any spacing),
    also when junk precedes it; None when the line holds none."""
    lower = line.lower()
    at = lower.rfind(b"content-length")
    if at < 0:
        return None
    rest = lower[at + len(b"content-length"):].lstrip(b" \t")
    if not rest.startswith(b":"):
        return None
    digits = rest[1:].strip()
    if not digits.isdigit() or len(digits) > 12:
        log.warning("unusable Content-Length header: %r", line[:80])
        return None
    return int(digits)


# ---- messages -------------------------------------------------------------------------------
class Dispatcher:
    """Checks each message, enforces the lifecycle, and passes the rest to the pygls protocol.

    `authenticate(params) -> str | None` (TCP mode) vets the initialize request: a message
    means refusal, and the connection is closed after the answer."""

    def __init__(self, protocol: JsonRPCProtocol, write: Callable[[bytes], None],
                 authenticate: Callable[[object], str | None] | None = None) -> None:
        self.protocol = protocol
        self.write = write                  # bytes -> None
        self.authenticate = authenticate
        self.initialized = False
        self.shut_down = False
        self.exit_code: int | None = None
        self.refused = False

    # ---- answers
    def send(self, message: Message) -> None:
        body = json.dumps(message, separators=(",", ":")).encode("utf-8")
        self.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def error(self, msg_id: object, code: int, message: str, data: object = None) -> None:
        """An error response; msg_id is the request's id as the client sent it (or None)."""
        err: Message = {"code": code, "message": message}
        if data is not None:
            err["data"] = data
        self.send({"jsonrpc": "2.0", "id": msg_id, "error": err})

    # ---- one frame
    def dispatch(self, frame: Frame) -> None:
        if frame.body is None:
            self.error(None, INVALID_REQUEST, f"message of {frame.length} bytes is over the {MAX_BODY}-byte limit")
            return
        try:
            data = json.loads(frame.body)
        except (ValueError, UnicodeDecodeError) as e:
            self.error(None, PARSE_ERROR, f"Parse error: the message body is not valid UTF-8 JSON ({e})")
            return
        problem = _envelope_problem(data)
        if problem is not None:
            msg_id = data.get("id") if isinstance(data, dict) and _valid_id(data.get("id")) else None
            if msg_id is not None or not isinstance(data, dict) or "method" not in data or "id" in data:
                self.error(msg_id, INVALID_REQUEST, f"Invalid request: {problem}")
            else:
                log.warning("dropping an invalid notification: %s", problem)
            return
        if "method" not in data:            # a response to one of our requests
            if self.initialized:
                self._handle(data, None)
            return
        method, is_request = data["method"], "id" in data
        if method == "exit":
            self.exit_code = 0 if self.shut_down else 1
            return
        if not self._lifecycle_allows(data, method, is_request):
            return
        handled = self._handle(data, data if is_request else None)
        if handled and method == "initialize":
            self.initialized = True         # (an initialize with bad params leaves the server waiting)
        if handled and method == "shutdown":
            self.shut_down = True

    def _lifecycle_allows(self, data: Message, method: str, is_request: bool) -> bool:
        msg_id = data.get("id")
        if self.shut_down:
            if is_request:
                self.error(msg_id, INVALID_REQUEST, f"Invalid request: `{method}` after `shutdown`; "
                                                    "only `exit` is accepted now")
            return False
        if method == "initialize":
            if not is_request:
                log.warning("`initialize` sent as a notification; dropped")
                return False
            if self.initialized:
                self.error(msg_id, INVALID_REQUEST, "Invalid request: the server is already initialized")
                return False
            if self.authenticate is not None:
                refusal = self.authenticate(data.get("params"))
                if refusal is not None:
                    self.error(msg_id, INVALID_REQUEST, refusal)
                    self.refused = True
                    return False
            return True
        if not self.initialized:
            if is_request:
                self.error(msg_id, SERVER_NOT_INITIALIZED, f"Server not initialized: `{method}` before `initialize`")
            else:
                log.warning("dropping notification %s before initialize", method)
            return False
        return True

    def _handle(self, data: Message, request: Message | None) -> bool:
        """Structure the message and hand it to pygls; False when its params do not fit."""
        try:
            message = self.protocol.structure_message(data)
        except Exception as exc:  # params that do not fit the method's type
            where = _structure_problem(exc)
            if request is not None:
                self.error(request["id"], INVALID_PARAMS,
                           f"Invalid params for `{request['method']}`: {where}")
            else:
                log.warning("dropping %s: %s", data.get("method", "a response"), where)
            return False
        try:
            self.protocol.handle_message(message)
        except Exception:   # pygls answers handler errors itself; this is a bug in the glue
            log.exception("handling %s failed", data.get("method"))
            if request is not None:
                self.error(request["id"], -32603, f"Internal error while handling `{request['method']}` "
                                                  "(see the server log)")
        return True


def _valid_id(msg_id: object) -> TypeGuard[int | str]:
    return isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool)


def _envelope_problem(data: object) -> str | None:
    if not isinstance(data, dict):
        return "a message must be a JSON object" + (" (batches are not part of LSP)" if isinstance(data, list) else "")
    if data.get("jsonrpc") != "2.0":
        return 'missing or wrong "jsonrpc" (must be "2.0")'
    if "id" in data and not _valid_id(data["id"]):
        return '"id" must be an integer or a string'
    if "method" in data:
        if not isinstance(data["method"], str) or not data["method"]:
            return '"method" must be a non-empty string'
        if "params" in data and data["params"] is not None and not isinstance(data["params"], (dict, list)):
            return None   # the method's own type check answers -32602 with the details
        return None
    if "id" in data and ("result" in data or "error" in data):
        return None
    return 'a message needs a "method" (request or notification) or a "result"/"error" (response)'


def _structure_problem(exc: Exception) -> str:
    """A readable account of a cattrs structuring failure (no traceback)."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    try:
        lines = cattrs.transform_error(cause, path="message") if isinstance(cause, cattrs.BaseValidationError) \
            else [str(cause)]
    except Exception:
        lines = [str(cause)]
    text = "; ".join(lines[:4]) or type(cause).__name__
    return text[:500]


# ---- the loop -------------------------------------------------------------------------------
def _answer_pending(protocol: JsonRPCProtocol, why: str) -> None:
    """Every request gets an answer, also one still being worked on when the session ends
    (protocol.KinaProtocol.answer_pending; the output may be closed already)."""
    answer = getattr(protocol, "answer_pending", None)
    if answer is None:
        return
    try:
        answer(f"the server is exiting ({why}) before it finished this request")
    except (BrokenPipeError, OSError):
        log.info("the client's end is closed; requests still open at %s are not answered", why)


async def serve(source: ByteSource, dispatcher: Dispatcher, stop: asyncio.Event | None = None) -> int:
    """Read and dispatch frames until `exit`, end of input or `stop`; returns the exit code."""
    frames = FrameReader(source)
    while dispatcher.exit_code is None and not dispatcher.refused:
        if stop is not None and stop.is_set():
            break
        frame = await frames.next()
        if frame is None:
            log.info("end of input")
            break
        dispatcher.dispatch(frame)
    _answer_pending(dispatcher.protocol, "exit" if dispatcher.exit_code is not None else "end of input")
    if dispatcher.exit_code is not None:
        return dispatcher.exit_code
    return 0 if dispatcher.shut_down else 1
