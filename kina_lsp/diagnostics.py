"""Diagnostics: exactly the CLI's, converted to LSP, pushed or pulled.

The compiler's Diagnostic (code, message, span, notes) becomes an LSP
Diagnostic with the same code and message, source "kina", its span converted
to the negotiated position encoding and its notes as relatedInformation (notes
without a span are appended to the message, as the CLI prints them under the
caret line).  A diagnostic's Fix travels in `data` ({"fix": kind, "text": ...}),
which the client sends back with a code-action request (features/actions.py).

Two ways to deliver them, chosen from the client's capabilities at initialize:

- push (textDocument/publishDiagnostics): debounced per document, dropped when
  a newer edit arrived while the analysis ran;
- pull (textDocument/diagnostic, LSP 3.17), when the client can pull: the
  client asks after each edit, the answer is the analysis of the text it has
  now; a result id lets it skip unchanged reports, and an edit that lands while
  the request waits answers ServerCancelled with retriggerRequest, so the
  client asks again for the new text.  The server never pushes then (a client
  that pulls and also receives pushes would show everything twice).

"Build & validate" results (features/commands.py) are extra diagnostics of the text that
was validated, until the next edit.  A pushing client gets them with the rest; a
pulling client that accepts workspace/diagnostic/refresh gets them in its next
pull (the server asks it to pull); a pulling client without refresh gets them
pushed on their own (and never in a pull, so nothing is shown twice).
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import TYPE_CHECKING

from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException

from compiler.core.diagnostics import Diagnostic

from . import importers
from .convert import LineIndex
from .documents import Documents, View
from .settings import Settings

if TYPE_CHECKING:
    from .server import KinaServer

log = logging.getLogger(__name__)

SOURCE = "kina"
SERVER_CANCELLED = -32802
OPTIONS = lsp.DiagnosticOptions(identifier=SOURCE, inter_file_dependencies=True, workspace_diagnostics=False)
_SEVERITY = {"error": lsp.DiagnosticSeverity.Error, "warning": lsp.DiagnosticSeverity.Warning}


def to_lsp(diag: Diagnostic, index: LineIndex, uri: str) -> lsp.Diagnostic:
    related: list[lsp.DiagnosticRelatedInformation] = []
    loose: list[str] = []
    for note in diag.notes:
        if note.span is not None:
            related.append(lsp.DiagnosticRelatedInformation(
                location=lsp.Location(uri=uri, range=index.range(note.span)), message=note.message))
        else:
            loose.append(note.message)
    message = diag.message + "".join(f"\nnote: {m}" for m in loose)
    data = None if diag.fix is None else {"fix": diag.fix.kind, "text": diag.fix.text}
    return lsp.Diagnostic(
        range=index.range(diag.span), message=message, code=diag.code, source=SOURCE,
        severity=_SEVERITY.get(diag.severity, lsp.DiagnosticSeverity.Error),
        related_information=related or None, data=data)


def _result_id(diags: list[lsp.Diagnostic]) -> str:
    """Equal for equal reports (same codes, messages and ranges), within one server run."""
    key = repr([(d.code, d.message, d.range.start.line, d.range.start.character,
                 d.range.end.line, d.range.end.character) for d in diags])
    return hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()[:20]


class Publisher:
    """Diagnostics of every open document: debounced pushes, or answers to pulls."""

    def __init__(self, server: KinaServer, documents: Documents, settings: Settings) -> None:
        self.server, self.documents, self.settings = server, documents, settings
        self.pull = False             # set at initialize: the client pulls (textDocument/diagnostic)
        self.refresh = False          # ... and accepts workspace/diagnostic/refresh

    def configure(self, capabilities: lsp.ClientCapabilities | None) -> None:
        text = capabilities.text_document if capabilities else None
        self.pull = bool(text and text.diagnostic is not None)
        ws = capabilities.workspace if capabilities else None
        self.refresh = bool(ws and ws.diagnostics and ws.diagnostics.refresh_support)

    def diagnostics(self, uri: str, view: View, extra: bool = True) -> list[lsp.Diagnostic]:
        out = [to_lsp(d, view.index, uri) for d in view.snapshot.diagnostics]
        return out + list(self.documents.state(uri).extra) if extra else out

    @property
    def _extras_pushed(self) -> bool:
        """Validation results go out as pushes of their own (a pulling client without refresh)."""
        return self.pull and not self.refresh

    def set_extra(self, uri: str, extra: list[lsp.Diagnostic], view: View, version: int | None) -> None:
        self.documents.state(uri).extra = extra
        self.publish(uri, view, version)

    def edited(self, uri: str) -> None:
        """An edit makes validation results stale: drop them (and un-push them)."""
        if self.server.buffer(uri) is None:
            return   # not open (a didChange or didSave of a closed document): no state to make
        st = self.documents.state(uri)
        had, st.extra = st.extra, []
        if had and self._extras_pushed:
            self.server.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    # ---- push
    def schedule(self, uri: str, immediate: bool = False) -> None:
        if self.pull or self.server.buffer(uri) is None:
            return
        st = self.documents.state(uri)
        if st.debounce is not None:
            st.debounce.cancel()
        delay = 0.0 if immediate else self.settings.debounce_ms / 1000.0
        st.debounce = asyncio.get_running_loop().create_task(self._run(uri, delay))

    async def _run(self, uri: str, delay: float) -> None:
        try:
            if delay:
                await asyncio.sleep(delay)
            cur = self.server.buffer(uri)
            if cur is None:
                return
            _text, version = cur
            view = await self.documents.current(uri)
            latest = self.server.buffer(uri)
            if view is None or latest is None or latest[1] != version:
                return  # a newer edit arrived meanwhile; its own task publishes
            self.publish(uri, view, version)
            importers.changed(self.server, uri)    # then the files that import it (issue 29)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("publishing diagnostics for %s failed", uri)

    def publish(self, uri: str, view: View, version: int | None, refresh: bool = True) -> None:
        """Deliver the current diagnostics of uri: a push, or (pull mode) a refresh request
        (unless `refresh` is False: the caller sends one for several documents)."""
        if self._extras_pushed:
            self.server.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(
                uri=uri, diagnostics=list(self.documents.state(uri).extra), version=version))
            return
        if self.pull:
            if refresh:
                self.server.workspace_diagnostic_refresh(None)
            return
        self.server.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(
            uri=uri, diagnostics=self.diagnostics(uri, view), version=version))

    def clear(self, uri: str) -> None:
        if not self.pull or self._extras_pushed:
            self.server.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    # ---- pull
    async def report(self, params: lsp.DocumentDiagnosticParams) -> lsp.DocumentDiagnosticReport:
        uri = params.text_document.uri
        cur = self.server.buffer(uri)
        if cur is None:   # not open: nothing is known about it (files are never read from disk)
            return lsp.RelatedFullDocumentDiagnosticReport(items=[], result_id=_result_id([]))
        view = await self.documents.current(uri)
        latest = self.server.buffer(uri)
        if view is None or latest is None or latest[1] != cur[1]:
            raise JsonRpcException(code=SERVER_CANCELLED, message="the document changed; ask again",
                                   data={"retriggerRequest": True})
        items = self.diagnostics(uri, view, extra=not self._extras_pushed)
        rid = _result_id(items)
        if params.previous_result_id == rid:
            return lsp.RelatedUnchangedDocumentDiagnosticReport(result_id=rid)
        return lsp.RelatedFullDocumentDiagnosticReport(items=items, result_id=rid)
