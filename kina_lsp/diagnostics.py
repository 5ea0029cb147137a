"""Publishing diagnostics: exactly the CLI's, converted to LSP.

The compiler's Diagnostic (code, message, span, notes) becomes an LSP
Diagnostic with the same code and message, source "kina", its span converted
to UTF-16 positions and its notes as relatedInformation (notes without a span
are appended to the message, as the CLI prints them under the caret line).
Publishing is debounced per document and dropped when a newer edit arrived
while the analysis ran.
"""
from __future__ import annotations

import asyncio
import logging

from lsprotocol import types as lsp

from .convert import LineIndex

log = logging.getLogger(__name__)

SOURCE = "kina"
_SEVERITY = {"error": lsp.DiagnosticSeverity.Error, "warning": lsp.DiagnosticSeverity.Warning}


def to_lsp(diag, index: LineIndex, uri: str) -> lsp.Diagnostic:
    related, loose = [], []
    for note in diag.notes:
        if note.span is not None:
            related.append(lsp.DiagnosticRelatedInformation(
                location=lsp.Location(uri=uri, range=index.range(note.span)), message=note.message))
        else:
            loose.append(note.message)
    message = diag.message + "".join(f"\nnote: {m}" for m in loose)
    return lsp.Diagnostic(
        range=index.range(diag.span), message=message, code=diag.code, source=SOURCE,
        severity=_SEVERITY.get(getattr(diag, "severity", "error"), lsp.DiagnosticSeverity.Error),
        related_information=related or None)


class Publisher:
    """Debounced, version-checked publishDiagnostics for every open document."""

    def __init__(self, server, documents, settings):
        self.server, self.documents, self.settings = server, documents, settings

    def schedule(self, uri: str, immediate: bool = False) -> None:
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
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("publishing diagnostics for %s failed", uri)

    def publish(self, uri: str, view, version) -> None:
        st = self.documents.state(uri)
        diags = [to_lsp(d, view.index, uri) for d in view.snapshot.diagnostics]
        self.server.text_document_publish_diagnostics(lsp.PublishDiagnosticsParams(
            uri=uri, diagnostics=diags + list(st.extra), version=version))
