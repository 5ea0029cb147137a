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

from .convert import index_of, split_lines

if TYPE_CHECKING:
    from cattrs import Converter
    from pygls.lsp.server import LanguageServer

log = logging.getLogger(__name__)


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

    @lsp_method(lsp.INITIALIZE)
    def lsp_initialize(self, params: lsp.InitializeParams) -> Generator[Any, Any, lsp.InitializeResult]:
        inner = super().lsp_initialize(params)
        try:
            step = next(inner)            # pygls has made its workspace and now calls our handler
        except StopIteration as stop:
            result: lsp.InitializeResult = stop.value
            return result
        assert self._workspace is not None
        self._workspace = KinaWorkspace.like(self._workspace)
        while True:
            value = yield step
            try:
                step = inner.send(value)
            except StopIteration as stop:
                result = stop.value
                return result

    # ---- answers
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
        for tasks in list(self._tracked.values()):
            for task in list(tasks):
                task.cancel()
        self._tracked.clear()
        return (yield from super().lsp_shutdown(*args))
