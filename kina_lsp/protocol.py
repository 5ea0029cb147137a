"""pygls' LanguageServerProtocol with the parts Kina needs changed.

- Documents keep LSP line semantics (KinaWorkspace / KinaTextDocument): a line
  ends only at `\\n`, `\\r\\n` or `\\r`.  pygls splits lines with
  str.splitlines(), which also breaks at U+2028, U+2029, U+0085, VT, FF and
  FS..RS, so one such character in a file shifted every later incremental edit
  by a line and the server's copy silently drifted from the client's.
- Errors reach the client as a code and a message, never a traceback (pygls
  puts the traceback of an unexpected exception into the error's data); the
  traceback goes to the server log.
- `$/cancelRequest` reaches the work: pygls cancels the future of a request,
  but a command runs as an inner task that the future does not own, so a
  cancelled Build & validate ran on and reported "passed".  Handlers register
  their task with `track()`; cancelling the request (or `shutdown`) cancels it.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Generator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import MsgId
from pygls.protocol.language_server import lsp_method
from pygls.workspace import TextDocument, Workspace

from compiler.core.stdlib import STD_DIR

from .convert import index_of, split_lines

if TYPE_CHECKING:
    from cattrs import Converter
    from pygls.lsp.server import LanguageServer

log = logging.getLogger(__name__)

SERVER_CANCELLED = -32802


class KinaTextDocument(TextDocument):
    """A text document whose lines and incremental edits follow the LSP's line breaks."""

    @property
    def lines(self) -> tuple[str, ...]:
        return split_lines(self.source)

    def _apply_incremental_change(self, change: lsp.TextDocumentContentChangePartial) -> None:
        text = self.source
        index = index_of(text, str(self.position_codec.encoding or "utf-16"))
        start, end = index.offset(change.range.start), index.offset(change.range.end)
        if end < start:   # a reversed range: take it as the span between the two positions
            start, end = end, start
        self._source = text[:start] + change.text + text[end:]


class KinaWorkspace(Workspace):
    def _create_text_document(self, doc_uri: str, source: str | None = None, version: int | None = None,
                              language_id: str | None = None) -> KinaTextDocument:
        return KinaTextDocument(doc_uri, source=source, version=version, language_id=language_id,
                                sync_kind=self._sync_kind, position_codec=self.position_codec)

    def open_document(self, uri: str) -> TextDocument | None:
        """The document the client opened under `uri`, or None.  (Never a file read from
        disk: get_text_document() would read any path a client names.)"""
        docs: dict[str, TextDocument] = self.text_documents    # (pygls leaves the property untyped)
        return docs.get(unquote(uri))

    def update_text_document(self, text_doc: lsp.VersionedTextDocumentIdentifier,
                             change: lsp.TextDocumentContentChangeEvent) -> None:
        if self.open_document(text_doc.uri) is None:
            log.warning("didChange for %s, which is not open; ignored", text_doc.uri)
            return
        super().update_text_document(text_doc, change)

    @classmethod
    def like(cls, ws: Workspace) -> KinaWorkspace:
        folders = list(ws.folders.values())
        return cls(ws.root_uri, ws._sync_kind, folders, ws.position_encoding)


class RawResult:
    """A request's result as ready JSON text, sent without going through cattrs (for large
    answers built from cached fragments: see navigation.document_symbols)."""
    __slots__ = ("json",)

    def __init__(self, json_text: str) -> None:
        self.json = json_text


class KinaProtocol(LanguageServerProtocol):
    def __init__(self, server: LanguageServer, converter: Converter) -> None:
        super().__init__(server, converter)
        self._tracked: dict[MsgId, set[asyncio.Task[object]]] = {}          # request id -> asyncio tasks doing its work
        self._unanswered: dict[MsgId, str] = {}     # request id -> method, from arrival to its one answer

    @lsp_method(lsp.INITIALIZE)
    def lsp_initialize(self, params: lsp.InitializeParams) -> Generator[Any, Any, lsp.InitializeResult]:
        inner = super().lsp_initialize(params)
        try:
            step = next(inner)            # pygls has made its workspace and now calls our handler
        except StopIteration as stop:
            result: lsp.InitializeResult = stop.value
            result.capabilities.experimental = {"kina": {"stdPath": STD_DIR}}
            return result
        assert self._workspace is not None
        self._workspace = KinaWorkspace.like(self._workspace)
        while True:
            value = yield step
            try:
                step = inner.send(value)
            except StopIteration as stop:
                result = stop.value
                # where the standard library lives: the editor opens its files read-only
                # (editors/vscode/src/extension.ts)
                result.capabilities.experimental = {"kina": {"stdPath": STD_DIR}}
                return result

    # ---- bookkeeping
    def _execute_handler(self, msg_id: MsgId, handler: Any, callback: Any,
                         args: tuple[Any, ...] | None = None, kwargs: dict[str, Any] | None = None) -> None:
        """pygls files the future of every handler it runs under an id, requests and
        notifications alike (a notification, and each step of a generator handler such as
        didChange, under a fresh uuid), and only a request's answer takes it out again:
        every edit left a future behind for good.  Each is taken out when it is done."""
        def done(future: Future[Any]) -> None:
            if self._request_futures.get(msg_id) is future:
                del self._request_futures[msg_id]
            callback(future)
        super()._execute_handler(msg_id, handler, done, args, kwargs)

    def _run_generator(self, future: Future[Any] | None, *, gen: Generator[Any, Any, Any],
                       result_future: Future[Any]) -> None:
        # A step of a generator handler (executeCommand runs the command as one) that was
        # cancelled without its request (the loop ending at `exit`) raised CancelledError in
        # pygls' callback, past its `except Exception`: the request was never answered.
        if future is not None and future.cancelled():
            if not result_future.done():
                result_future.cancel()            # -> RequestCancelled
            return
        super()._run_generator(future, gen=gen, result_future=result_future)

    def unanswered(self) -> int:
        """Requests received and not answered yet (kina/serverStats)."""
        return len(self._unanswered)

    def in_flight(self) -> int:
        """Handlers running (or waiting for an answer of the client) now (kina/serverStats)."""
        return sum(not f.done() for f in self._request_futures.values())

    def futures(self) -> int:
        """Futures pygls holds (running or not): bounded by what is in flight."""
        return len(self._request_futures)

    # ---- answers: every request exactly one
    def _handle_request(self, msg_id: MsgId, method_name: str, params: Any) -> None:
        if msg_id in self._unanswered:   # two answers to one id would be ambiguous to the client
            self._send_error(msg_id, -32600, f"Invalid request: id {msg_id!r} is already in use by a "
                                             f"`{self._unanswered[msg_id]}` request the server has not answered yet")
            return
        self._unanswered[msg_id] = method_name
        super()._handle_request(msg_id, method_name, params)

    def _send_response(self, msg_id: MsgId, result: Any | None = None, error: Any | None = None) -> None:
        if self._answered(msg_id):
            super()._send_response(msg_id, result, error)

    def _answered(self, msg_id: MsgId) -> bool:
        """Take msg_id off the ledger; False when it was answered already (a second answer is dropped)."""
        if self._unanswered.pop(msg_id, None) is None:
            log.warning("a second answer to request %r dropped", msg_id)
            return False
        return True

    def _send_error(self, msg_id: MsgId, code: int, message: str) -> None:
        super()._send_response(msg_id, error=JsonRpcException(code=code, message=message).to_response_error())

    def answer_pending(self, message: str) -> None:
        """At the end of the session (`exit`, or the end of input): answer every request still
        being worked on with ServerCancelled, so none goes unanswered, and stop its work."""
        for msg_id, method in list(self._unanswered.items()):
            future = self._request_futures.pop(msg_id, None)
            for task in self._tracked.pop(msg_id, ()):
                task.cancel()
            log.info("`%s` request %r: %s", method, msg_id, message)
            self._send_response(msg_id, error=JsonRpcException(code=SERVER_CANCELLED, message=message)
                                .to_response_error())
            if future is not None:
                future.cancel()               # its own answer now finds the ledger empty

    def _send_handler_result(self, future: Future[Any], *, msg_id: MsgId) -> None:
        exc = None if future.cancelled() else future.exception()
        if exc is None and not future.cancelled() and isinstance(future.result(), RawResult):
            self._request_futures.pop(msg_id, None)
            self._send_raw_result(msg_id, future.result().json)
            return
        if exc is None or not isinstance(exc, Exception):
            super()._send_handler_result(future, msg_id=msg_id)
            return
        self._request_futures.pop(msg_id, None)
        if isinstance(exc, JsonRpcException):   # a deliberate answer: its message says why
            log.info("request %s: error %s: %s", msg_id, exc.code, exc.message)
            error = exc.to_response_error()
        else:
            log.error("request %s failed", msg_id, exc_info=(type(exc), exc, exc.__traceback__))
            error = JsonRpcException(code=-32603, message=f"internal error in kina-lsp ({type(exc).__name__}: "
                                                          f"{exc}); the server log has the details").to_response_error()
        self._send_response(msg_id, error=error)

    def _send_raw_result(self, msg_id: MsgId, result_json: str) -> None:
        if not self._answered(msg_id):
            return
        body = ('{"jsonrpc":"2.0","id":' + json.dumps(msg_id) + ',"result":' + result_json + "}").encode("utf-8")
        if self.writer is None:
            log.error("no transport to answer request %s", msg_id)
            return
        res = self.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        if inspect.isawaitable(res):
            asyncio.ensure_future(res)

    # ---- cancellation
    def track(self, task: asyncio.Task[object] | None = None) -> None:
        """Make the current request's cancellation cancel `task` (default: the running task)."""
        msg_id = self.msg_id
        task = task or asyncio.current_task()
        if msg_id is None or task is None:
            return
        self._tracked.setdefault(msg_id, set()).add(task)
        task.add_done_callback(lambda t: self._untrack(msg_id, t))

    def _untrack(self, msg_id: MsgId, task: asyncio.Task[object]) -> None:
        tasks = self._tracked.get(msg_id)
        if tasks is not None:
            tasks.discard(task)
            if not tasks:
                self._tracked.pop(msg_id, None)

    def _handle_cancel_notification(self, msg_id: MsgId) -> None:
        for task in list(self._tracked.pop(msg_id, ())):
            task.cancel()
        super()._handle_cancel_notification(msg_id)

    @lsp_method(lsp.SHUTDOWN)
    def lsp_shutdown(self, *args: Any) -> Generator[Any, Any, None]:
        """Cancel the work of every request but this one (each then answers RequestCancelled).
        pygls' own version walks its futures while cancelling them, and a cancelled
        generator future takes itself out of them at once (_execute_handler)."""
        for tasks in list(self._tracked.values()):
            for task in list(tasks):
                task.cancel()
        self._tracked.clear()
        current = self.msg_id
        for msg_id, future in list(self._request_futures.items()):
            if msg_id != current and not future.done():
                future.cancel()
        self._shutdown = True
        yield from ()   # (pygls runs lsp_method handlers as generators)
