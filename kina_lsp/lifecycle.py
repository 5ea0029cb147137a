"""The server's lifecycle and document sync: initialize (settings, the client's
capabilities, the parent-process watch), configuration changes, didOpen / didChange /
didSave / didClose and watched files (each schedules the document's diagnostics), and
pulled diagnostics.  server.py registers them (`register`), as it registers the features.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from . import diagnostics, importers
from .features import semantic

if TYPE_CHECKING:
    from .base import Safe
    from .server import KinaServer

log = logging.getLogger("kina_lsp")


async def _pull_configuration(ls: KinaServer) -> None:
    caps = ls.client_capabilities.workspace
    if not (caps and caps.configuration):
        return
    result = await ls.workspace_configuration_async(
        lsp.ConfigurationParams(items=[lsp.ConfigurationItem(section="kina")]))
    if result:
        ls.settings.update({"kina": result[0]} if isinstance(result[0], dict) else None)


def _watch_parent(pid: int) -> None:
    """Exit when the editor dies without closing our stdin (LSP processId)."""
    def watch() -> None:
        while True:
            time.sleep(3)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                log.info("client process %d is gone; exiting", pid)
                # through the SIGTERM handler (cli), which cleans up in the main thread
                os.kill(os.getpid(), signal.SIGTERM)
                return
            except PermissionError:
                pass  # it exists, owned by someone else
    threading.Thread(target=watch, name="kina-parent-watch", daemon=True).start()


_background: set[asyncio.Future[None]] = set()    # running cache fills (a task needs a reference)


async def _refresh_after_pull(ls: KinaServer, uri: str) -> None:
    await asyncio.sleep(ls.settings.debounce_ms / 1000.0)
    cur = ls.buffer(uri)
    if cur is not None and await ls.documents.current(uri) is not None and ls.buffer(uri) == cur:
        importers.changed(ls, uri)


def register(server: KinaServer, safe: Safe) -> None:
    @server.feature(lsp.INITIALIZE)
    @safe()
    def initialize(ls: KinaServer, params: lsp.InitializeParams) -> None:
        ls.settings.update(params.initialization_options)
        ls.publisher.configure(params.capabilities)
        if params.process_id and params.process_id > 0:
            _watch_parent(params.process_id)

    @server.feature(lsp.INITIALIZED)
    @safe()
    async def initialized(ls: KinaServer, params: lsp.InitializedParams) -> None:
        _background.add(task := asyncio.ensure_future(importers.register_watcher(ls)))
        task.add_done_callback(_background.discard)
        await _pull_configuration(ls)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    @safe()
    async def did_change_configuration(ls: KinaServer, params: lsp.DidChangeConfigurationParams) -> None:
        ls.settings.update(params.settings)
        await _pull_configuration(ls)
        for uri in list(ls.workspace.text_documents):
            ls.publisher.schedule(uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    @safe()
    def did_open(ls: KinaServer, params: lsp.DidOpenTextDocumentParams) -> None:
        ls.documents.opened(params.text_document.uri)
        ls.publisher.schedule(params.text_document.uri, immediate=True)
        _background.add(task := asyncio.ensure_future(semantic.warm(ls, params.text_document.uri)))
        task.add_done_callback(_background.discard)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    @safe()
    def did_change(ls: KinaServer, params: lsp.DidChangeTextDocumentParams) -> None:
        ls.publisher.edited(params.text_document.uri)  # validation results are for the old text
        ls.publisher.schedule(params.text_document.uri)
        if ls.publisher.pull:   # (a push refreshes the importers after the document's own push)
            _background.add(task := asyncio.ensure_future(_refresh_after_pull(ls, params.text_document.uri)))
            task.add_done_callback(_background.discard)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    @safe()
    def did_change_watched_files(ls: KinaServer, params: lsp.DidChangeWatchedFilesParams) -> None:
        importers.files_changed(ls, params)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE)
    @safe()
    def did_save(ls: KinaServer, params: lsp.DidSaveTextDocumentParams) -> None:
        ls.publisher.schedule(params.text_document.uri, immediate=True)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    @safe()
    def did_close(ls: KinaServer, params: lsp.DidCloseTextDocumentParams) -> None:
        ls.documents.close(params.text_document.uri)
        ls.publisher.clear(params.text_document.uri)
        importers.changed(ls, params.text_document.uri)   # they read its file again, not the closed buffer

    @server.feature(lsp.TEXT_DOCUMENT_DIAGNOSTIC, diagnostics.OPTIONS)
    async def on_diagnostic(ls: KinaServer, params: lsp.DocumentDiagnosticParams) -> lsp.DocumentDiagnosticReport:
        # not @safe: an empty report would wipe the client's diagnostics; a failure is an error
        return await ls.publisher.report(params)
